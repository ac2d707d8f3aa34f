//! `fence elect` and `fence observe`: leader election from a shell.

use std::sync::Arc;
use std::time::Duration;

use fencing::election::{ElectionConfig, LeaderElector};
use fencing::FencingSource;
use serde_json::json;

use crate::events::{emit, term};
use crate::failure::{Failure, Result};
use crate::source_arg::{self, SOURCE_ENV};

pub const ELECT_EXAMPLES: &str = "\
Examples:
  fence elect --source etcd://127.0.0.1:2379/elections --election scheduler --identity node-a
  fence elect --source local:///var/lib/fence --election scheduler --lease-duration 6 --renew-deadline 4 --retry-period 1

Prints one JSON line per change, for example:
  {\"event\":\"elected\",\"election\":\"scheduler\",\"identity\":\"node-a\",\"token\":\"42\"}
  {\"event\":\"lost\",\"election\":\"scheduler\",\"identity\":\"node-a\",\"token\":\"42\",\"reason\":\"...\"}
  {\"event\":\"resigned\",\"election\":\"scheduler\",\"identity\":\"node-a\",\"token\":\"57\"}
After a loss it campaigns again. SIGINT or SIGTERM resigns and exits 0.
Tokens are decimal strings; each term has its own, higher than every earlier term's.

Exit status: 0 after SIGINT/SIGTERM, 2 on a usage or configuration error,
1 on a failure the campaign cannot retry (e.g. permission denied).";

pub const OBSERVE_EXAMPLES: &str = "\
Examples:
  fence observe --source zk://127.0.0.1:2181/elections --election scheduler
  fence observe --source local:///var/lib/fence --election scheduler --retry-period 0.5

Prints the current leader, then one JSON line per change:
  {\"event\":\"leader\",\"election\":\"scheduler\",\"identity\":\"node-a\",\"token\":\"42\"}
  {\"event\":\"no_leader\",\"election\":\"scheduler\"}
Errors of the source go to stderr and the observer keeps polling.

Exit status: 0 after SIGINT/SIGTERM, 2 on a usage or configuration error,
1 when the source refuses the query for good (e.g. permission denied).";

#[derive(clap::Args, Debug)]
pub struct ElectArgs {
    /// Where the election lives: local://DIR, etcd://..., etcds://..., zk://..., kube://..., postgres://...
    #[arg(long, value_name = "URL", env = SOURCE_ENV, hide_env_values = true)]
    source: String,

    /// The election's name (candidates of one election share it)
    #[arg(long, value_name = "NAME")]
    election: String,

    /// This candidate's identity [default: host name, pid and a random suffix]
    #[arg(long, value_name = "ID")]
    identity: Option<String>,

    /// Lease length in seconds (client-go LeaseDuration)
    #[arg(long, value_name = "SECS", default_value = "15", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    lease_duration: Duration,

    /// A leader that cannot renew for this long steps down (client-go RenewDeadline)
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    renew_deadline: Duration,

    /// Wait between campaign attempts after an error (client-go RetryPeriod)
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    retry_period: Duration,

    /// Join kube-apiserver's coordinated leader election as a LeaseCandidate
    /// of this binary version, optionally emulating an older one
    /// (kube:// only; versions MAJOR.MINOR.PATCH, e.g. 1.36.0:1.35.0)
    #[arg(long, value_name = "BINARY[:EMULATION]")]
    coordinated: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct ObserveArgs {
    /// Where the election lives: local://DIR, etcd://..., etcds://..., zk://..., kube://..., postgres://...
    #[arg(long, value_name = "URL", env = SOURCE_ENV, hide_env_values = true)]
    source: String,

    /// The election to watch
    #[arg(long, value_name = "NAME")]
    election: String,

    /// How often to ask the source who leads
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = source_arg::seconds, allow_negative_numbers = true)]
    retry_period: Duration,
}

pub async fn elect(args: ElectArgs) -> Result<()> {
    let identity = args
        .identity
        .unwrap_or_else(fencing::default_holder_identity);
    let config = ElectionConfig::new(identity)
        .lease_duration(args.lease_duration)
        .renew_deadline(args.renew_deadline)
        .retry_period(args.retry_period);
    let source = coordinated_url(&args.source, args.coordinated.as_deref())?;
    let elector = elector(&source, &args.election, config).await?;
    let name = args.election.as_str();
    loop {
        let leadership = tokio::select! {
            l = elector.campaign() => l.map_err(|e| source_arg::classify(e, &format!("election {name:?}")))?,
            _ = crate::interrupted() => return Ok(()),
        };
        let fields = term(leadership.identity(), leadership.token());
        emit("elected", name, fields.clone());
        tokio::select! {
            reason = leadership.lost() => {
                let mut fields = fields;
                fields["reason"] = json!(reason.to_string());
                emit("lost", name, fields);
                // Dropping the lost term releases whatever is left of it;
                // then campaign again, as a client-go candidate would.
            }
            _ = crate::interrupted() => {
                if let Err(e) = leadership.resign().await {
                    tracing::warn!(error = %e, "resign failed; the lease expires by itself");
                }
                emit("resigned", name, fields);
                return Ok(());
            }
        }
    }
}

pub async fn observe(args: ObserveArgs) -> Result<()> {
    // Only the retry period matters to an observer; the other two are
    // chosen to satisfy the config's rules (lease > renew > 1.2 x retry).
    let retry = args.retry_period;
    let config = ElectionConfig::new("fence-observe")
        .lease_duration(retry * 4)
        .renew_deadline(retry * 2)
        .retry_period(retry);
    let elector = elector(&args.source, &args.election, config).await?;
    let name = args.election.as_str();
    let mut observer = elector.observe();
    loop {
        let next = tokio::select! {
            n = observer.changed() => n,
            _ = crate::interrupted() => return Ok(()),
        };
        match next {
            Ok(Some(leader)) => emit("leader", name, term(&leader.identity, leader.token)),
            Ok(None) => emit("no_leader", name, json!({})),
            Err(e @ (fencing::Error::PermissionDenied { .. } | fencing::Error::Config(_))) => {
                return Err(source_arg::classify(e, &format!("election {name:?}")))
            }
            Err(e) => eprintln!(
                "fence: observe {name:?}: {}",
                Failure::runtime(e.to_string()).one_line()
            ),
        }
    }
}

/// The source URL with `--coordinated`'s versions as its parameters.
fn coordinated_url(url: &str, versions: Option<&str>) -> Result<String> {
    let Some(versions) = versions else {
        return Ok(url.to_owned());
    };
    let refuse = |why: String| source_arg::classify(fencing::Error::Config(why), "--coordinated");
    if !url.to_ascii_lowercase().starts_with("kube://") {
        return Err(refuse(
            "coordinated election is Kubernetes' (a kube:// source)".into(),
        ));
    }
    if !versions
        .bytes()
        .all(|b| b.is_ascii_digit() || b == b'.' || b == b':')
    {
        return Err(refuse(format!(
            "{versions:?} is not BINARY[:EMULATION] with versions MAJOR.MINOR.PATCH"
        )));
    }
    let (binary, emulation) = versions.split_once(':').unwrap_or((versions, versions));
    let separator = if url.contains('?') { '&' } else { '?' };
    Ok(format!(
        "{url}{separator}coordinated=true&binary_version={binary}&emulation_version={emulation}"
    ))
}

async fn elector(url: &str, election: &str, config: ElectionConfig) -> Result<LeaderElector> {
    // Everything that can be checked offline is refused before connecting.
    let election = source_arg::resource("--election", election)?;
    config
        .check()
        .map_err(|e| source_arg::classify(e, "election settings"))?;
    let source: Arc<dyn FencingSource> = source_arg::open(url).await?;
    LeaderElector::new(source, election, config)
        .map_err(|e| source_arg::classify(e, "election settings"))
}
