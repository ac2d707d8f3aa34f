//! `--backend kube`: KubeLeaseSource against client-go's leader election
//! (`client-go-elector`) on one real kube-apiserver, with the same timings
//! (lease 3 s, renew deadline 2 s, retry period 0.5 s).
//!
//! - acquire: a free Lease (released by the previous iteration) until
//!   granted. Rust: one GET and one UPDATE. client-go: from the start of a
//!   round to its `leading` line, which the program prints after one more
//!   GET (for the token); the table also shows client-go minus one median
//!   GET as measured by the Rust client.
//! - release: Rust, `Grant::release` (one UPDATE). client-go: `leading` to
//!   `stopped_leading` minus the 1 ms hold (cancel, release UPDATE).
//!   client-go rounds are 1.5 s apart so its client-side throttle (5 QPS,
//!   burst 10) never delays a round.
//! - failover: a holder process is SIGKILLed while a second candidate
//!   waits; the time until the second holds. Dominated by the lease
//!   duration on both sides (expiry is judged from the last observed change).

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fencing::{AcquireOptions, FencingSource, ResourceName};
use fencing_harness::kubernetes::cluster::{client_go_elector_binary, KubeUser};
use fencing_harness::kubernetes::fixture::{client_go_timing_flags, KubeFixture};
use fencing_harness::Reaped;
use fencing_kube::KubeLeaseSource;
use rustix::process::Signal;

use super::{bounded, print_header, print_metric, stats, Args, BoxError, Stats, LOCK_TIMEOUT};

const FAILOVERS: usize = 3;
/// Between two Rust iterations.
const PAUSE: Duration = Duration::from_millis(100);
/// Between two client-go rounds: client-go's client throttles itself to
/// 5 requests/s after a burst of 10 (rest.Config defaults, which the
/// elector keeps), and one round makes about five requests; with this
/// pause the bucket refills and no round waits on the throttle.
const GO_PAUSE: Duration = Duration::from_millis(1500);
/// Counted client-go rounds (they are slow because of the pause).
const GO_ROUNDS: usize = 15;
const GO_HOLD: Duration = Duration::from_millis(1);

pub(super) async fn run(args: Args) -> Result<(), BoxError> {
    let elector = client_go_elector_binary()?;
    let holder = std::env::current_exe()?.with_file_name("holder");
    if !holder.is_file() {
        return Err(format!(
            "{} is missing: cargo build -p fencing-integration-tests --bin holder",
            holder.display()
        )
        .into());
    }
    let n = args.iterations.min(40);
    let f = KubeFixture::start().await;
    println!(
        "anchor-bench: kube-apiserver v{} on etcd 3.6, N={n} (client-go {}), {FAILOVERS} failovers, lease 3 s / renew 2 s / retry 0.5 s",
        fencing_harness::cache::kubernetes_release(),
        n.min(GO_ROUNDS)
    );
    let (rust_acq, rust_rel, rust_get) = rust_latency(&f, n).await?;
    let (go_acq, go_rel) = go_latency(&f, &elector, n.min(GO_ROUNDS))?;
    let rust_fail = rust_failover(&f, &holder).await?;
    let go_fail = go_failover(&f, &elector)?;

    print_header("client-go");
    let acq = print_metric("acquire", rust_acq, go_acq);
    let adjusted = Stats {
        median_us: go_acq.median_us - rust_get.median_us,
        p90_us: go_acq.p90_us - rust_get.median_us,
    };
    let acq_adj = print_metric("acquire (go - 1 GET)", rust_acq, adjusted);
    let rel = print_metric("release", rust_rel, go_rel);
    let fail = print_metric("failover", rust_fail, go_fail);
    println!(
        "anchor-bench kube: acquire ratio {acq:.2} ({acq_adj:.2} without client-go's token GET), release ratio {rel:.2}, failover ratio {fail:.2}"
    );
    Ok(())
}

fn r(name: &str) -> ResourceName {
    ResourceName::new(name).expect("bench lease name")
}

/// Acquire and release of a free Lease, and a plain GET (holder()).
async fn rust_latency(f: &KubeFixture, n: usize) -> Result<(Stats, Stats, Stats), BoxError> {
    let source = KubeLeaseSource::connect(f.config(KubeUser::LeaseUser)).await?;
    let lock = r("bench-rust");
    let opts = AcquireOptions::new().wait(LOCK_TIMEOUT);
    // Warm-up: creates the Lease and the connection.
    source.acquire(&lock, &opts).await?.release().await?;
    let (mut acquire, mut release, mut get) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let t0 = Instant::now();
        let g = source.acquire(&lock, &opts).await?;
        let t1 = Instant::now();
        g.release().await?;
        let t2 = Instant::now();
        bounded("holder", source.holder(&lock)).await??;
        let t3 = Instant::now();
        acquire.push(t1 - t0);
        release.push(t2 - t1);
        get.push(t3 - t2);
        tokio::time::sleep(PAUSE).await;
    }
    let (a, rl, g) = (stats(acquire), stats(release), stats(get));
    println!(
        "rust      : acquire {:.0} µs, release {:.0} µs, GET {:.0} µs (medians)",
        a.median_us, rl.median_us, g.median_us
    );
    Ok((a, rl, g))
}

/// A client-go elector with the test timings (lease 3 s, renew 2 s, retry 0.5 s).
fn elector(f: &KubeFixture, binary: &std::path::Path, lease: &str, id: &str) -> Command {
    let mut cmd = f.client_go_elector(binary, KubeUser::LeaseUser, lease, id);
    cmd.args(client_go_timing_flags());
    cmd
}

/// One JSON line of the elector, waiting at most `limit` (off the
/// runtime's threads).
fn next_event(p: &Reaped, limit: Duration) -> Result<serde_json::Value, BoxError> {
    loop {
        let line = tokio::task::block_in_place(|| p.next_line(limit))
            .ok_or("client-go-elector printed nothing in time")?;
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
            return Ok(v);
        }
    }
}

fn nanos(v: &serde_json::Value) -> Result<i64, BoxError> {
    v["t"]
        .as_i64()
        .ok_or_else(|| format!("event without t: {v}").into())
}

/// n+1 rounds of one client-go process: acquire a free Lease, hold 1 ms,
/// release; the first round (creation, connection) is not counted.
fn go_latency(
    f: &KubeFixture,
    binary: &std::path::Path,
    n: usize,
) -> Result<(Stats, Stats), BoxError> {
    let mut cmd = elector(f, binary, "bench-go", "go-bench");
    let pause = format!("{}ms", GO_PAUSE.as_millis());
    cmd.args([
        "--rounds",
        &(n + 1).to_string(),
        "--hold",
        "1ms",
        "--pause",
        &pause,
    ]);
    let p = Reaped::spawn(&mut cmd)?;
    let (mut acquire, mut release) = (Vec::new(), Vec::new());
    let mut round_start = None;
    let mut leading_at = None;
    let mut round = 0;
    loop {
        let e = next_event(&p, Duration::from_secs(60))?;
        match e["event"].as_str() {
            Some("started") => round_start = Some(nanos(&e)?),
            Some("leading") => leading_at = Some(nanos(&e)?),
            Some("stopped_leading") => {
                let (start, lead, stop) = (
                    round_start.ok_or("no round start")?,
                    leading_at.take().ok_or("stopped without leading")?,
                    nanos(&e)?,
                );
                round += 1;
                if round > 1 {
                    acquire.push(Duration::from_nanos((lead - start).max(0) as u64));
                    let hold = GO_HOLD.as_nanos() as i64;
                    release.push(Duration::from_nanos((stop - lead - hold).max(0) as u64));
                }
                round_start = Some(stop + GO_PAUSE.as_nanos() as i64);
            }
            Some("done") => break,
            _ => {}
        }
    }
    if acquire.len() != n {
        return Err(format!("client-go led {} of {n} counted rounds", acquire.len()).into());
    }
    let (a, rl) = (stats(acquire), stats(release));
    println!(
        "client-go : acquire {:.0} µs (incl. its token GET), release {:.0} µs (medians)",
        a.median_us, rl.median_us
    );
    Ok((a, rl))
}

/// A `holder` process (KubeLeaseSource through fencing::connect) holds;
/// an in-process candidate waits; SIGKILL; time until the candidate holds.
async fn rust_failover(f: &KubeFixture, holder: &std::path::Path) -> Result<Stats, BoxError> {
    let mut times = Vec::new();
    let dir = tempfile::tempdir()?;
    for i in 0..FAILOVERS {
        let lease = format!("failover-rust-{i}");
        let url = f.url(KubeUser::LeaseUser);
        let p = Reaped::spawn(
            Command::new(holder)
                .args([url.as_str(), lease.as_str()])
                .arg(dir.path().join("never")),
        )?;
        let line = tokio::task::block_in_place(|| p.next_line(Duration::from_secs(30)))
            .ok_or("holder printed nothing")?;
        if !line.starts_with("GRANTED ") {
            return Err(format!("holder said {line:?}").into());
        }
        let candidate = KubeLeaseSource::connect(f.config(KubeUser::LeaseUser)).await?;
        let waiter = tokio::spawn({
            let lease = r(&lease);
            async move {
                let opts = AcquireOptions::new().wait(LOCK_TIMEOUT);
                let g = candidate.acquire(&lease, &opts).await?;
                let at = Instant::now();
                g.release().await?;
                Ok::<_, fencing::Error>(at)
            }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        let killed = Instant::now();
        p.signal(Signal::KILL);
        let granted = waiter.await??;
        drop(p);
        times.push(granted - killed);
    }
    let s = stats(times);
    println!(
        "rust      : failover {:.0} ms (median)",
        s.median_us / 1000.0
    );
    Ok(s)
}

/// A client-go process leads; a second one campaigns; SIGKILL the first;
/// time until the second prints `leading`.
fn go_failover(f: &KubeFixture, binary: &std::path::Path) -> Result<Stats, BoxError> {
    let mut times = Vec::new();
    for i in 0..FAILOVERS {
        let lease = format!("failover-go-{i}");
        let mut first = elector(f, binary, &lease, "go-first");
        first.args(["--rounds", "1", "--hold", "60s"]);
        let a = Reaped::spawn(&mut first)?;
        while next_event(&a, Duration::from_secs(30))?["event"] != "leading" {}
        let mut second = elector(f, binary, &lease, "go-second");
        second.args(["--rounds", "1", "--hold", "1ms"]);
        let b = Reaped::spawn(&mut second)?;
        while next_event(&b, Duration::from_secs(30))?["event"] != "new_leader" {}
        std::thread::sleep(Duration::from_millis(500));
        let killed = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as i64;
        a.signal(Signal::KILL);
        let led = loop {
            let e = next_event(&b, Duration::from_secs(30))?;
            if e["event"] == "leading" {
                break nanos(&e)?;
            }
        };
        drop((a, b));
        times.push(Duration::from_nanos((led - killed).max(0) as u64));
    }
    let s = stats(times);
    println!(
        "client-go : failover {:.0} ms (median)",
        s.median_us / 1000.0
    );
    Ok(s)
}
