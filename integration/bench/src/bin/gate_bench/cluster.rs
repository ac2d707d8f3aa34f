//! The gates that keep their marks in the coordinator itself, on real
//! 3-member clusters (etcd 3.6, ZooKeeper 3.9):
//!
//! - `EtcdGate` / `ZkGate` admit, on its two paths: a raise (the token is
//!   above the mark: a read, then a conditional write of the new mark) and
//!   a retry at the mark (the read alone);
//! - the guarded write of data kept in the same cluster (`guarded_txn`,
//!   `guarded_multi`: the write and the check that the grant still holds,
//!   in one request) against the same write sent plain, on the same
//!   connection. That ratio is the price of fencing a write there.
//!
//! The four kinds take turns in rounds (the first one rotates) so slow
//! drift hits all of them; each figure is the median of the rounds'
//! medians.

use std::future::Future;
use std::time::Instant;

use fencing::{AcquireOptions, FencingSource, FencingToken, Gate, ResourceName};
use fencing_bench::{bounded, median, BoxError, OP_TIMEOUT};
use fencing_etcd::etcd_client::{self, TxnOp};
use fencing_etcd::{EtcdConfig, EtcdSource};
use fencing_harness::etcd::cluster::{EtcdCluster, EtcdVersion};
use fencing_harness::zk::ensemble::{ZkEnsemble, ZkVersion};
use fencing_zookeeper::zookeeper_client::{self, Acls, CreateMode};
use fencing_zookeeper::{ZkConfig, ZkSource};

const ROUNDS: usize = 4;
const KINDS: [&str; 4] = ["raise", "equal", "guarded", "plain"];

/// One CSV row: a backend, a kind and its median latency.
pub struct Row {
    pub backend: &'static str,
    pub kind: &'static str,
    pub median_us: f64,
}

/// Both clusters, `iterations` requests per kind and round.
pub async fn run(iterations: usize) -> Result<Vec<Row>, BoxError> {
    let mut rows = etcd(iterations).await?;
    rows.extend(zk(iterations).await?);
    Ok(rows)
}

fn resource(name: &str) -> ResourceName {
    ResourceName::new(name).expect("a valid bench resource name")
}

async fn etcd(iterations: usize) -> Result<Vec<Row>, BoxError> {
    let cluster = EtcdCluster::start(EtcdVersion::V3_6, 3).await?;
    let cfg = EtcdConfig::new(cluster.endpoints(), "/gate-bench")?.request_timeout(OP_TIMEOUT);
    let source = EtcdSource::connect(cfg).await?;
    let raw = bounded(
        "etcd connect",
        etcd_client::Client::connect(cluster.endpoints(), None),
    )
    .await??;
    let gate = source.gate("/gate-bench/marks")?;
    let (marks, lock) = (resource("marks"), resource("data"));
    let grant = bounded("acquire", source.acquire(&lock, &AcquireOptions::new())).await??;
    let (gate, marks, source_ref, grant_ref) = (&gate, &marks, &source, &grant);
    let mut token = 0u64;
    let figures = rounds(iterations, move |kind, i| {
        let value = i.to_string();
        let t = next_token(&mut token, kind);
        let (source, grant, mut raw) = (source_ref, grant_ref, raw.clone());
        async move {
            match kind {
                "raise" | "equal" => {
                    bounded("etcd gate", gate.admit_any_source(marks, t)).await??
                }
                "guarded" => {
                    let put = TxnOp::put("/gate-bench/value", value, None);
                    bounded("guarded txn", source.guarded_txn(grant, vec![put])).await??;
                }
                _ => {
                    bounded("plain put", raw.put("/gate-bench/value", value, None)).await??;
                }
            }
            Ok(())
        }
    })
    .await?;
    bounded("release", grant.release()).await??;
    print_figures("etcd 3.6", "guarded_txn", "put", &figures);
    Ok(to_rows("etcd", figures))
}

async fn zk(iterations: usize) -> Result<Vec<Row>, BoxError> {
    let ensemble = ZkEnsemble::start(ZkVersion::V3_9, 3).await?;
    let cfg = ZkConfig::new(ensemble.endpoints(), "/gate-bench")?.request_timeout(OP_TIMEOUT);
    let source = ZkSource::connect(cfg).await?;
    let raw = bounded(
        "zk connect",
        zookeeper_client::Client::connect(&ensemble.connect_string()),
    )
    .await??;
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    bounded("create", raw.create("/gate-bench-value", b"0", &options)).await??;
    let gate = source.gate("/gate-bench-marks")?;
    let (marks, lock) = (resource("marks"), resource("data"));
    let grant = bounded("acquire", source.acquire(&lock, &AcquireOptions::new())).await??;
    let (gate, marks, source_ref, grant_ref, raw) = (&gate, &marks, &source, &grant, &raw);
    let mut token = 0u64;
    let figures = rounds(iterations, move |kind, i| {
        let value = i.to_string();
        let t = next_token(&mut token, kind);
        let (source, grant) = (source_ref, grant_ref);
        async move {
            match kind {
                "raise" | "equal" => bounded("zk gate", gate.admit_any_source(marks, t)).await??,
                "guarded" => {
                    let set = |w: &mut zookeeper_client::MultiWriter<'_>| {
                        w.add_set_data("/gate-bench-value", value.as_bytes(), None)
                    };
                    bounded("guarded multi", source.guarded_multi(grant, set)).await??;
                }
                _ => {
                    let set = raw.set_data("/gate-bench-value", value.as_bytes(), None);
                    bounded("plain setData", set).await??;
                }
            }
            Ok(())
        }
    })
    .await?;
    bounded("release", grant.release()).await??;
    print_figures("ZooKeeper 3.9", "guarded_multi", "setData", &figures);
    Ok(to_rows("zk", figures))
}

/// The token of the next admit: one above the last for a raise, the last
/// one again for a retry at the mark.
fn next_token(last: &mut u64, kind: &str) -> FencingToken {
    if kind == "raise" || *last == 0 {
        *last += 1;
    }
    FencingToken::new(*last)
}

/// `ROUNDS` rounds of every kind, `iterations` calls each; the median of
/// the rounds' medians per kind, in µs, in the order of `KINDS`.
async fn rounds<F, Fut>(iterations: usize, mut call: F) -> Result<[f64; 4], BoxError>
where
    F: FnMut(&'static str, usize) -> Fut,
    Fut: Future<Output = Result<(), BoxError>>,
{
    let mut medians: [Vec<f64>; 4] = Default::default();
    for round in 0..ROUNDS {
        for turn in 0..KINDS.len() {
            let k = (turn + round) % KINDS.len();
            let mut samples = Vec::with_capacity(iterations);
            for i in 0..iterations {
                let started = Instant::now();
                call(KINDS[k], i).await?;
                samples.push(started.elapsed().as_secs_f64() * 1e6);
            }
            medians[k].push(median(samples));
        }
    }
    Ok(medians.map(median))
}

fn print_figures(cluster: &str, guarded: &str, plain: &str, f: &[f64; 4]) {
    println!(
        "gate-bench: {cluster} gate raise {:.0} µs, retry at the mark {:.0} µs; {guarded} {:.0} µs vs plain {plain} {:.0} µs, ratio {:.2}",
        f[0],
        f[1],
        f[2],
        f[3],
        f[2] / f[3]
    );
}

fn to_rows(backend: &'static str, f: [f64; 4]) -> Vec<Row> {
    KINDS
        .iter()
        .zip(f)
        .map(|(&kind, median_us)| Row {
            backend,
            kind,
            median_us,
        })
        .collect()
}
