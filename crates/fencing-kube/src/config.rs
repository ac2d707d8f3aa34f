//! Settings of a [`KubeLeaseSource`](crate::KubeLeaseSource) and the
//! `kube://NAMESPACE?...` URL form.

use std::path::PathBuf;
use std::time::Duration;

use fencing_core::__private::{positive_seconds, UrlParts};
use fencing_core::{Error, Result};

use crate::candidate::Candidacy;
use crate::names::check_namespace;

use fencing_core::LeaderTimings;

/// Default limit for one request to the apiserver.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Lease timing and request settings, with the names and defaults of
/// client-go's `LeaderElectionConfig`.
///
/// ```
/// use std::time::Duration;
/// use fencing::kube::LeaseOptions;
///
/// let o = LeaseOptions::default()
///     .lease_duration(Duration::from_secs(6))
///     .renew_deadline(Duration::from_secs(4))
///     .retry_period(Duration::from_secs(1));
/// assert!(o.check().is_ok());
/// assert!(LeaseOptions::default().renew_deadline(Duration::from_secs(20)).check().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseOptions {
    /// client-go's timings ([`LeaderTimings`]), used here as follows.
    ///
    /// - `lease_duration`: `leaseDurationSeconds` written into the Lease, how
    ///   long other candidates wait, on their own clocks, after they last
    ///   saw the Lease change. Whole seconds (rounded up).
    /// - `renew_deadline`: how long the holder keeps the grant without a
    ///   confirmed renewal; the grant counts as lost locally once this
    ///   (minus a 10 % drift margin) has passed since the last successful
    ///   renewal was sent.
    /// - `retry_period`: the interval between renewals, and between
    ///   attempts of a waiting candidate.
    ///
    /// Every candidate judges expiry on its own clock's rate (client-go
    /// does too), and sees a renewal only through the Lease's change. So
    /// the margin between the two durations is the tolerated clock-rate
    /// skew: a candidate whose clock runs at rate `r` against the holder's
    /// takes over after `lease_duration / r` of the holder's time, which
    /// is safe while that is at least the holder's `renew_deadline`, i.e.
    /// `r <= lease_duration / renew_deadline` (1.5 at client-go's defaults,
    /// 15 s and 10 s). A clock running twice as fast breaks that at the
    /// defaults; the gate then refuses the old holder's late writes.
    pub timings: LeaderTimings,
    /// Limit for each request to the apiserver.
    pub request_timeout: Duration,
    /// Name of the cluster in the source identity; `None` uses the
    /// apiserver URL. Set it when several URLs reach one cluster (proxies,
    /// several apiservers) so grants validate across them.
    pub cluster: Option<String>,
    /// Join kube-apiserver's coordinated leader election instead of taking
    /// Leases ourselves: see [`LeaseOptions::coordinated`].
    pub coordinated: Option<Candidacy>,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            timings: LeaderTimings::default(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            cluster: None,
            coordinated: None,
        }
    }
}

impl LeaseOptions {
    /// Sets the lease duration (rounded up to whole seconds, at least 1 s).
    #[must_use]
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.timings.lease_duration = whole_seconds(d);
        self
    }

    /// Replaces all three timings (the lease duration rounded up to whole
    /// seconds).
    #[must_use]
    pub fn timings(mut self, timings: LeaderTimings) -> Self {
        self.timings = timings.lease_duration(whole_seconds(timings.lease_duration));
        self
    }

    /// Sets the renew deadline.
    #[must_use]
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.timings.renew_deadline = d;
        self
    }

    /// Sets the retry period.
    #[must_use]
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.timings.retry_period = d;
        self
    }

    /// Sets the per-request time limit.
    #[must_use]
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// Names the cluster in the source identity.
    #[must_use]
    pub fn cluster(mut self, name: impl Into<String>) -> Self {
        self.cluster = Some(name.into());
        self
    }

    /// Acquires through kube-apiserver's coordinated leader election
    /// (Kubernetes 1.33+ with the `CoordinatedLeaderElection` feature gate
    /// and `coordination.k8s.io/v1beta1` served): an acquire publishes a
    /// LeaseCandidate named after the holder identity (which must then be
    /// a DNS-1123 subdomain), answers the controller's pings, and waits
    /// until the controller names the holder in the Lease; the grant then
    /// renews the Lease itself. Its token is the resourceVersion of the
    /// grant's first write, made with the controller's write as its
    /// precondition, so tokens still grow from term to term. When the
    /// controller prefers another candidate (`preferredHolder`), the grant
    /// is lost with [`LossReason::Yielded`](fencing_core::LossReason::Yielded);
    /// a release also deletes the LeaseCandidate.
    ///
    /// The controller judges expiry from the Lease's `renewTime` on the
    /// apiserver's wall clock, which our renewals write from ours: the
    /// margin between lease duration and renew deadline must also cover
    /// the skew between the two clocks.
    #[must_use]
    pub fn coordinated(mut self, candidacy: Candidacy) -> Self {
        self.coordinated = Some(candidacy);
        self
    }

    /// client-go's rule: lease duration > renew deadline > 1.2 x retry
    /// period, all positive; a valid [`Candidacy`] if coordinated;
    /// otherwise [`Error::Config`].
    pub fn check(&self) -> Result<()> {
        if self.request_timeout.is_zero() {
            return Err(Error::Config(
                "Kubernetes request timeout must be positive".into(),
            ));
        }
        if let Some(c) = &self.coordinated {
            c.check()?;
        }
        self.timings.check()
    }

    /// The timings for one grant. A TTL given with the acquire replaces the
    /// lease duration; if the configured renew deadline and retry period do
    /// not fit under it, both are scaled with client-go's proportions
    /// ([`LeaderTimings::scaled_to`]) so the grant still follows the rule.
    pub(crate) fn grant_timings(&self, ttl: Option<Duration>) -> LeaderTimings {
        let Some(ttl) = ttl else {
            return self.timings;
        };
        let given = self.timings.lease_duration(whole_seconds(ttl));
        if given.check().is_ok() {
            given
        } else {
            LeaderTimings::scaled_to(given.lease_duration)
        }
    }
}

/// `leaseDurationSeconds` of a Lease written with these timings: rounded
/// up, since other candidates wait this long and the holder counts on the
/// whole lease (`timings` is a public field, so a fraction gets here).
pub(crate) fn lease_seconds(timings: &LeaderTimings) -> i32 {
    i32::try_from(whole_seconds(timings.lease_duration).as_secs()).unwrap_or(i32::MAX)
}

/// Where the Leases live and how to reach the apiserver.
///
/// The client comes from the kubeconfig file given here; without one from
/// `KUBECONFIG` or `~/.kube/config`; without those from the in-cluster
/// service account.
///
/// ```
/// use std::time::Duration;
/// use fencing::kube::KubeLeaseConfig;
///
/// let cfg = KubeLeaseConfig::from_url("kube://team-a?kubeconfig=/etc/kube/admin.conf&ttl=6&renew_deadline=4&retry_period=1")?;
/// assert_eq!(cfg.namespace, "team-a");
/// assert_eq!(cfg.options.timings.lease_duration, Duration::from_secs(6));
/// assert!(KubeLeaseConfig::from_url("kube://?kubeconfig=/x").is_err()); // no namespace
/// # Ok::<(), fencing::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KubeLeaseConfig {
    /// Namespace of the Leases (a DNS-1123 label).
    pub namespace: String,
    /// Explicit kubeconfig file; `None` infers the client configuration.
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    pub context: Option<String>,
    /// Lease timings, the cluster's name and coordinated candidacy.
    pub options: LeaseOptions,
}

impl KubeLeaseConfig {
    /// Settings with defaults for Leases in `namespace`.
    pub fn new(namespace: impl Into<String>) -> Result<Self> {
        let namespace = namespace.into();
        check_namespace(&namespace)?;
        Ok(KubeLeaseConfig {
            namespace,
            kubeconfig: None,
            context: None,
            options: LeaseOptions::default(),
        })
    }

    /// Reads the client configuration from this kubeconfig file.
    #[must_use]
    pub fn kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig = Some(path.into());
        self
    }

    /// Uses this kubeconfig context.
    #[must_use]
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// Replaces the timing and identity options.
    #[must_use]
    pub fn options(mut self, options: LeaseOptions) -> Self {
        self.options = options;
        self
    }

    /// Parses `kube://NAMESPACE[?kubeconfig=PATH&context=NAME&ttl=SECS&renew_deadline=SECS&retry_period=SECS&request_timeout=SECS&cluster=NAME]`.
    ///
    /// `coordinated=true&binary_version=X.Y.Z[&emulation_version=X.Y.Z]`
    /// joins coordinated leader election ([`LeaseOptions::coordinated`]).
    ///
    /// `lease_duration=` is a synonym of `ttl=`. A TTL given without
    /// `renew_deadline=` and `retry_period=` scales them as an acquire's TTL
    /// does (client-go's 15 : 10 : 2 when the defaults do not fit under it);
    /// given values are kept and must follow client-go's rule. The grammar is the shared
    /// one of [`UrlParts`] (the scheme in any case, values percent-decoded,
    /// a parameter given twice refused). Every problem is an
    /// [`Error::Config`] naming it.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = UrlParts::parse(url, "kube")?;
        let bad = |why: &str| url.error(why);
        if url.scheme() != "kube" {
            return Err(bad("must start with kube://"));
        }
        let namespace = url.target().strip_suffix('/').unwrap_or(url.target());
        if namespace.is_empty() {
            return Err(bad(
                "the namespace is missing (kube://NAMESPACE?kubeconfig=PATH)",
            ));
        }
        if url.param("ttl").is_some() && url.param("lease_duration").is_some() {
            return Err(bad("ttl= is given twice (lease_duration= is its synonym)"));
        }
        let mut cfg = KubeLeaseConfig::new(namespace).map_err(|e| bad(&e.to_string()))?;
        for (k, v) in url.params() {
            let key = if k == "lease_duration" { "ttl" } else { k };
            cfg.apply(key, v).map_err(|why| bad(&why))?;
        }
        // A TTL alone means what it means on an acquire: the default renew
        // deadline and retry period, or both scaled if they do not fit.
        let timed = |k: &str| url.param(k).is_some();
        if !timed("renew_deadline") && !timed("retry_period") {
            let o = &mut cfg.options;
            o.timings = o.grant_timings(Some(o.timings.lease_duration));
        }
        cfg.options.coordinated = candidacy(&url).map_err(|why| bad(&why))?;
        cfg.options.check().map_err(|e| bad(&e.to_string()))?;
        Ok(cfg)
    }

    fn apply(&mut self, key: &str, value: &str) -> std::result::Result<(), String> {
        let secs = |name: &str| {
            positive_seconds(value)
                .ok_or_else(|| format!("{name}={value:?} is not a positive number of seconds"))
        };
        let text = |name: &str| {
            (!value.is_empty())
                .then(|| value.to_owned())
                .ok_or_else(|| format!("{name}= is empty"))
        };
        let o = &mut self.options;
        match key {
            "kubeconfig" => self.kubeconfig = Some(text("kubeconfig")?.into()),
            "context" => self.context = Some(text("context")?),
            "cluster" => o.cluster = Some(text("cluster")?),
            "ttl" => o.timings.lease_duration = whole_seconds(secs("ttl")?),
            "renew_deadline" => o.timings.renew_deadline = secs("renew_deadline")?,
            "retry_period" => o.timings.retry_period = secs("retry_period")?,
            "request_timeout" => o.request_timeout = secs("request_timeout")?,
            "timeout" => {
                return Err("timeout= is request_timeout= (the limit of each request); how long an \
                            acquire may wait is AcquireOptions::wait"
                    .into())
            }
            // Read together by `candidacy`.
            "coordinated" | "binary_version" | "emulation_version" => {}
            other => {
                return Err(format!(
                "unknown parameter {other:?} (known: kubeconfig, context, cluster, ttl, lease_duration, renew_deadline, retry_period, request_timeout, coordinated, binary_version, emulation_version)"
            ))
            }
        }
        Ok(())
    }
}

/// The candidacy of `coordinated=true&binary_version=..&emulation_version=..`.
fn candidacy(url: &UrlParts) -> std::result::Result<Option<Candidacy>, String> {
    let (binary, emulation) = (url.param("binary_version"), url.param("emulation_version"));
    match url.param("coordinated") {
        None | Some("false") if binary.is_none() && emulation.is_none() => Ok(None),
        None | Some("false") => {
            Err("binary_version= and emulation_version= need coordinated=true".into())
        }
        Some("true") => {
            let binary = binary.ok_or("coordinated=true needs binary_version=MAJOR.MINOR.PATCH")?;
            let c = Candidacy::new(binary).map_err(|e| e.to_string())?;
            match emulation {
                Some(v) => c.emulation_version(v).map(Some).map_err(|e| e.to_string()),
                None => Ok(Some(c)),
            }
        }
        Some(other) => Err(format!("coordinated={other:?} is not true or false")),
    }
}

/// Leases count in whole seconds: round up, at least one.
fn whole_seconds(d: Duration) -> Duration {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Duration::from_secs(secs.clamp(1, i32::MAX as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencing_core::DEFAULT_LEASE_DURATION;
    use proptest::prelude::*;

    fn config_err(url: &str) -> String {
        match KubeLeaseConfig::from_url(url) {
            Err(Error::Config(msg)) => msg,
            other => panic!("{url:?} should be a config error: {other:?}"),
        }
    }

    #[test]
    fn lease_seconds_never_shorten_the_lease() {
        let mut t = LeaderTimings::default();
        for (ms, secs) in [(1_900, 2), (2_000, 2), (100, 1), (15_001, 16)] {
            t.lease_duration = Duration::from_millis(ms);
            assert_eq!(lease_seconds(&t), secs, "{ms} ms");
        }
    }

    #[test]
    fn parses_namespace_and_every_option() {
        let c = KubeLeaseConfig::from_url(
            "kube://team-a/?kubeconfig=/k/conf&context=ctx&cluster=prod&lease_duration=5.5&renew_deadline=4&retry_period=0.5&request_timeout=2",
        )
        .unwrap();
        assert_eq!(c.namespace, "team-a");
        assert_eq!(c.kubeconfig, Some(PathBuf::from("/k/conf")));
        assert_eq!(c.context.as_deref(), Some("ctx"));
        assert_eq!(c.options.cluster.as_deref(), Some("prod"));
        let t = c.options.timings;
        assert_eq!(t.lease_duration, Duration::from_secs(6));
        assert_eq!(t.renew_deadline, Duration::from_secs(4));
        assert_eq!(t.retry_period, Duration::from_millis(500));
        assert_eq!(c.options.request_timeout, Duration::from_secs(2));
        let d = KubeLeaseConfig::from_url("KUBE://default").unwrap();
        assert_eq!(d.options, LeaseOptions::default());
        assert_eq!(d.kubeconfig, None);
    }

    #[test]
    fn refuses_bad_urls_naming_the_problem() {
        for (url, needle) in [
            ("kube://", "namespace is missing"),
            ("kube://?kubeconfig=/x", "namespace is missing"),
            ("kube:///", "namespace is missing"),
            ("kube://Team", "DNS-1123 label"),
            ("kube://a/b", "DNS-1123 label"),
            ("etcd://a:1/x", "must start with kube://"),
            ("kube://a?ttl=0", "ttl=\"0\""),
            ("kube://a?ttl=-1", "ttl="),
            ("kube://a?request_timeout=nan", "timeout="),
            ("kube://a?kubeconfig=", "kubeconfig= is empty"),
            ("kube://a?ttl=3&lease_duration=4", "given twice"),
            ("kube://a?bogus=1", "unknown parameter \"bogus\""),
            ("kube://a?ttl", "not key=value"),
            ("kube://a#x", "fragment"),
            (
                "kube://a?ttl=5&renew_deadline=6",
                "must be greater than renew_deadline",
            ),
            ("kube://a?renew_deadline=2", "1.2 x retry_period"),
        ] {
            let msg = config_err(url);
            assert!(msg.contains(needle), "{url}: {msg}");
        }
    }

    #[test]
    fn coordinated_urls_name_their_versions() {
        let c = KubeLeaseConfig::from_url(
            "kube://a?coordinated=true&binary_version=1.36.1&emulation_version=1.35.0",
        )
        .unwrap();
        let candidacy = c.options.coordinated.unwrap();
        assert_eq!(
            (
                candidacy.binary_version.as_str(),
                candidacy.emulation_version.as_str()
            ),
            ("1.36.1", "1.35.0")
        );
        let c =
            KubeLeaseConfig::from_url("kube://a?coordinated=true&binary_version=2.0.0").unwrap();
        assert_eq!(c.options.coordinated.unwrap().emulation_version, "2.0.0");
        assert_eq!(
            KubeLeaseConfig::from_url("kube://a?coordinated=false")
                .unwrap()
                .options
                .coordinated,
            None
        );
        for (url, needle) in [
            ("kube://a?coordinated=true", "needs binary_version="),
            ("kube://a?binary_version=1.0.0", "need coordinated=true"),
            (
                "kube://a?coordinated=yes&binary_version=1.0.0",
                "not true or false",
            ),
            (
                "kube://a?coordinated=true&binary_version=1.36",
                "MAJOR.MINOR.PATCH",
            ),
            (
                "kube://a?coordinated=true&binary_version=1.0.0&emulation_version=1.0.1",
                "above binary version",
            ),
        ] {
            let msg = config_err(url);
            assert!(msg.contains(needle), "{url}: {msg}");
        }
    }

    #[test]
    fn a_short_ttl_scales_the_other_timings() {
        let o = LeaseOptions::default();
        let t = o.grant_timings(Some(Duration::from_secs(3)));
        assert_eq!(t, LeaderTimings::scaled_to(Duration::from_secs(3)));
        assert_eq!(t.retry_period, Duration::from_millis(400));
        let t = o.grant_timings(Some(Duration::from_millis(20_500)));
        assert_eq!(
            (t.lease_duration, t.renew_deadline),
            (Duration::from_secs(21), o.timings.renew_deadline)
        );
        assert_eq!(o.grant_timings(None).lease_duration, DEFAULT_LEASE_DURATION);
        // The same rule for a URL that gives the TTL alone.
        let url = KubeLeaseConfig::from_url("kube://a?ttl=3").unwrap();
        assert_eq!(
            url.options.timings,
            LeaderTimings::scaled_to(Duration::from_secs(3))
        );
        let url = KubeLeaseConfig::from_url("kube://a?ttl=30").unwrap();
        assert_eq!(url.options.timings.renew_deadline, o.timings.renew_deadline);
    }

    proptest! {
        #[test]
        fn url_parser_never_panics(s in any::<String>()) {
            let _ = KubeLeaseConfig::from_url(&s);
            let _ = KubeLeaseConfig::from_url(&format!("kube://{s}"));
            let _ = KubeLeaseConfig::from_url(&format!("kube://ns?{s}"));
        }

        #[test]
        fn accepted_urls_satisfy_the_timing_rule(
            ttl in 1u32..40, renew in 1u32..40, retry in 1u32..40
        ) {
            let url = format!("kube://ns?ttl={ttl}&renew_deadline={renew}&retry_period={retry}");
            if let Ok(c) = KubeLeaseConfig::from_url(&url) {
                let t = c.options.timings;
                prop_assert!(t.lease_duration > t.renew_deadline);
                prop_assert!(t.renew_deadline.as_secs_f64() > 1.2 * t.retry_period.as_secs_f64());
            }
        }

        #[test]
        fn scaled_timings_always_satisfy_the_rule(ttl_ms in 1u64..100_000) {
            let t = LeaseOptions::default().grant_timings(Some(Duration::from_millis(ttl_ms)));
            prop_assert!(t.check().is_ok(), "{:?}", t);
        }
    }
}
