//! `--backend kube`: KubeLeaseSource (one per waiter, each its own client)
//! vs client-go's leader election (one `client-go-elector` process per
//! waiter, each its own client), on one Lease of one real kube-apiserver
//! (etcd 3.6 behind it), with the kube tests' timings: lease 3 s, renew
//! deadline 2 s, retry period 0.5 s.
//!
//! Waiting candidates poll the Lease every retry period on both sides, so a
//! hand-over waits for the next poll of some waiter and every waiter's polls
//! count against it. Requests per hand-over: `apiserver_request_total` of
//! resource `leases` (all verbs; the apiserver's own lease renewals fall
//! into the window too), read from `/metrics` as the admin just before the
//! release and after the last waiter's release.
//!
//! - ours: the holder releases with `Grant::release`; grant = `acquire`
//!   returned.
//! - client-go: the holder (`--hold 600s`) gets SIGTERM, which cancels its
//!   elector and releases the Lease (release-on-cancel); a waiter
//!   (`--rounds 1 --hold 1ms`) is granted at its `leading` line, which the
//!   program prints after one GET of the Lease (for the token), so its
//!   figures include that GET. Times are wall-clock (`t` of the line minus
//!   the moment before the SIGTERM).
//!
//! W above `MAX_W` is skipped (W processes and W pollers at 2 requests/s
//! each on two cores).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_bench::BoxError;
use fencing_harness::kubernetes::cluster::{client_go_elector_binary, KubeUser};
use fencing_harness::kubernetes::fixture::{client_go_timing_flags, KubeFixture};
use fencing_harness::Reaped;
use fencing_kube::KubeLeaseSource;
use rustix::process::Signal;

use super::{figures, measure, pass_down, Figures, Report, OP_TIMEOUT, PHASE_LIMIT};

const MAX_W: usize = 64;
/// After the waiters started and before the release: four retry periods,
/// so every waiter has polled (and found the Lease held) at least once.
const SETTLE: Duration = Duration::from_secs(2);
/// One event line of a client-go process.
const LINE_LIMIT: Duration = Duration::from_secs(60);

pub(super) async fn run(counts: &[usize], report: &mut Report) -> Result<(), BoxError> {
    let elector = client_go_elector_binary()?;
    let f = KubeFixture::start().await;
    report.title(&format!(
        "kube-apiserver v{} on etcd 3.6, KubeLeaseSource vs client-go leader election (a client per waiter on both sides), lease 3 s / renew 2 s / retry 0.5 s",
        fencing_harness::cache::kubernetes_release()
    ));
    for &w in counts {
        if w > MAX_W {
            println!("waiter-bench: W={w} skipped: kube runs at most W={MAX_W}");
            continue;
        }
        let (f, elector) = (&f, &elector);
        measure(report, w, || go_side(f, elector, w), || rust_side(f, w)).await?;
    }
    Ok(())
}

/// `apiserver_request_total` of resource `leases`, by verb.
async fn lease_requests(f: &KubeFixture) -> Result<BTreeMap<String, f64>, BoxError> {
    let admin = f.cluster(|c| c.admin_client());
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = tokio::time::timeout(OP_TIMEOUT, admin.request_text(request))
        .await
        .map_err(|_| "GET /metrics timed out")??;
    let mut by_verb = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        if !labels.contains("resource=\"leases\"") {
            continue;
        }
        let verb = labels
            .split(',')
            .find_map(|l| l.strip_prefix("verb=\""))
            .map(|v| v.trim_end_matches('"').to_string())
            .unwrap_or_default();
        *by_verb.entry(verb).or_insert(0.0) += value.trim().parse::<f64>()?;
    }
    Ok(by_verb)
}

/// Requests between two readings of `side`'s run at `w`: printed by verb,
/// returned in total.
fn delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    side: &str,
    w: usize,
) -> f64 {
    let verbs: BTreeMap<String, f64> = after
        .iter()
        .map(|(v, n)| (v.clone(), n - before.get(v).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    println!("waiter-bench: W={w} {side} lease requests by verb: {verbs:?}");
    verbs.values().sum()
}

async fn rust_side(f: &KubeFixture, w: usize) -> Result<Figures, BoxError> {
    let lease = ResourceName::new(format!("waiters-rust-{w}"))?;
    let opts = AcquireOptions::new().wait(PHASE_LIMIT);
    let connect = || async {
        tokio::time::timeout(
            OP_TIMEOUT,
            KubeLeaseSource::connect(f.config(KubeUser::LeaseUser)),
        )
        .await
        .map_err(|_| BoxError::from("KubeLeaseSource::connect timed out"))?
        .map_err(BoxError::from)
    };
    let holder = connect().await?;
    let held = holder.acquire(&lease, &opts).await?;
    let mut queue = tokio::task::JoinSet::new();
    for _ in 0..w {
        let source = connect().await?;
        let (lease, opts) = (lease.clone(), opts.clone());
        queue.spawn(async move {
            let grant = source.acquire(&lease, &opts).await?;
            let at = Instant::now();
            grant.release().await?;
            Ok::<_, BoxError>(at)
        });
    }
    tokio::time::sleep(SETTLE).await;
    let before = lease_requests(f).await?;
    let granted_us = pass_down(w, async { Ok(held.release().await?) }, &mut queue).await?;
    let requests = delta(&before, &lease_requests(f).await?, "rust", w);
    Ok(figures(granted_us, requests))
}

/// A client-go elector with the test timings (lease 3 s, renew 2 s, retry 0.5 s).
fn elector(f: &KubeFixture, binary: &std::path::Path, lease: &str, id: &str) -> Command {
    let mut cmd = f.client_go_elector(binary, KubeUser::LeaseUser, lease, id);
    cmd.args(client_go_timing_flags());
    cmd
}

/// The next event of `p` (non-JSON lines skipped), waiting at most
/// `LINE_LIMIT` off the runtime's threads.
fn next_event(p: &Reaped, who: &str) -> Result<serde_json::Value, BoxError> {
    loop {
        let line = tokio::task::block_in_place(|| p.next_line(LINE_LIMIT))
            .ok_or_else(|| format!("{who} printed nothing within {LINE_LIMIT:?} (or exited)"))?;
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
            return Ok(v);
        }
    }
}

/// Reads events of `p` until `want`.
fn until(p: &Reaped, who: &str, want: &str) -> Result<serde_json::Value, BoxError> {
    loop {
        let e = next_event(p, who)?;
        if e["event"] == want {
            return Ok(e);
        }
    }
}

async fn go_side(f: &KubeFixture, binary: &std::path::Path, w: usize) -> Result<Figures, BoxError> {
    let lease = format!("waiters-go-{w}");
    let holder = Reaped::spawn(
        elector(f, binary, &lease, "go-holder").args(["--rounds", "1", "--hold", "600s"]),
    )?;
    until(&holder, "the client-go holder", "leading")?;
    let mut waiters = Vec::with_capacity(w);
    for i in 0..w {
        let id = format!("go-waiter-{i}");
        waiters.push(Reaped::spawn(
            elector(f, binary, &lease, &id).args(["--rounds", "1", "--hold", "1ms"]),
        )?);
    }
    // Each has read the Lease and found the holder.
    for (i, p) in waiters.iter().enumerate() {
        until(p, &format!("client-go waiter {i}"), "new_leader")?;
    }
    tokio::time::sleep(SETTLE).await;
    let before = lease_requests(f).await?;
    let t0 = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as f64;
    holder.signal(Signal::TERM);
    let mut granted_us = Vec::with_capacity(w);
    let deadline = Instant::now() + PHASE_LIMIT;
    for (i, p) in waiters.iter().enumerate() {
        let who = format!("client-go waiter {i}");
        let led = until(p, &who, "leading")?;
        let t = led["t"].as_f64().ok_or("leading without t")?;
        granted_us.push((t - t0) / 1000.0);
        // Its release is in the window, as ours is.
        until(p, &who, "stopped_leading")?;
        if Instant::now() > deadline {
            return Err(
                format!("W={w}: client-go waiters not all granted within {PHASE_LIMIT:?}").into(),
            );
        }
    }
    let requests = delta(&before, &lease_requests(f).await?, "go", w);
    // Dropping them kills and reaps whatever has not exited yet.
    drop((holder, waiters));
    Ok(figures(granted_us, requests))
}
