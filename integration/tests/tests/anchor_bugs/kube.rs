//! client-go's leader election (the `client-go-elector repro` subcommand)
//! against `LeaderElector` on `KubeLeaseSource`, under the same fault.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencing::ResourceName;
use fencing_election::{ElectionConfig, LeaderElector};
use fencing_harness::kubernetes::cluster::{client_go_elector_binary, KubeUser};
use fencing_harness::kubernetes::fixture::KubeFixture;
use fencing_kube::KubeLeaseSource;
use tokio::process::Command;

use super::driver::{int, verdict, Stepped};

/// The holder's timings: valid for client-go (lease > renew deadline >
/// 1.2 x retry period), and what a user picks to notice a dead leader
/// quickly while renewing rarely.
const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_millis(2900);
const RETRY: Duration = Duration::from_millis(2400);
/// The contender polls often, so it takes over as soon as the Lease has
/// expired in its eyes.
const FAST_RENEW: Duration = Duration::from_millis(1000);
const FAST_RETRY: Duration = Duration::from_millis(200);

const EVENT: Duration = Duration::from_secs(30);

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// A `client-go-elector repro` candidate on `lease`, through `kubeconfig`.
fn candidate(
    f: &KubeFixture,
    kubeconfig: &Path,
    lease: &str,
    id: &str,
    (renew, retry): (Duration, Duration),
) -> Stepped {
    let bin = client_go_elector_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(bin);
    cmd.arg("repro")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--namespace",
            f.namespace(),
            "--name",
            lease,
            "--identity",
            id,
        ])
        .args(["--lease-duration", &ms(LEASE)])
        .args(["--renew-deadline", &ms(renew)])
        .args(["--retry-period", &ms(retry)]);
    Stepped::spawn(&mut cmd)
}

fn unix_nanos() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap()
}

fn secs(nanos: i64) -> f64 {
    nanos as f64 / 1e9
}

/// kubernetes/kubernetes#67651's class: a leader whose renewals fail goes on
/// leading until its renew deadline, and client-go counts that deadline
/// from the start of the renewal round, which begins a retry period after
/// the last successful renewal; its work's context ends later still, after
/// the release attempt (bounded by the renew deadline again). A contender
/// takes over once the lease duration has passed since it saw that last
/// renewal. So with lease 3 s, renew deadline 2.9 s, retry period 2.4 s
/// (valid for client-go) the old leader acts until about 5.3 s + 2.9 s
/// after its last renewal, the new one from about 3 s: two leaders. The
/// fault is a blackhole between the leader and the apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_split_brain_past_the_renew_deadline() {
    let f = KubeFixture::start().await;
    let direct = f.kubeconfig(KubeUser::LeaseUser);

    // The anchor: client-go leads through a proxy, a fast client-go
    // contender waits, the proxy is blackholed.
    let proxy = f.proxy().await;
    let via = f.kubeconfig_via(KubeUser::LeaseUser, &proxy.endpoint());
    let mut leader = candidate(&f, &via, "split-go", "go-leader", (RENEW, RETRY));
    leader.expect("leading", EVENT).await;
    let mut contender = candidate(
        &f,
        &direct,
        "split-go",
        "go-contender",
        (FAST_RENEW, FAST_RETRY),
    );
    contender.expect("new_leader", EVENT).await;
    // Cut right after a renewal, so that the last one is known.
    leader.expect("renewed", EVENT).await;
    proxy.set_blackhole(true);
    let cut = unix_nanos();
    let took_over = int(&contender.expect("leading", EVENT).await, "t");
    let term_ended = int(&leader.expect("term_ended", EVENT).await, "t");
    leader.finish(Duration::from_secs(5)).await;
    contender.finish(Duration::from_secs(5)).await;
    let overlap = term_ended - took_over;
    let anchor = overlap > 0;

    // Ours: the same timings, the same contender, the same blackhole.
    let proxy = f.proxy().await;
    let via = f.kubeconfig_via(KubeUser::LeaseUser, &proxy.endpoint());
    let options = f
        .options()
        .lease_duration(LEASE)
        .renew_deadline(RENEW)
        .retry_period(RETRY);
    let source = KubeLeaseSource::connect(f.config_with(via).options(options))
        .await
        .expect("connect via proxy");
    let config = ElectionConfig::new("ours-leader")
        .lease_duration(LEASE)
        .renew_deadline(RENEW)
        .retry_period(RETRY);
    let elector =
        LeaderElector::new(source, ResourceName::new("split-ours").unwrap(), config).unwrap();
    let leadership = elector.campaign().await.unwrap();
    let mut contender = candidate(
        &f,
        &direct,
        "split-ours",
        "go-contender",
        (FAST_RENEW, FAST_RETRY),
    );
    contender.expect("new_leader", EVENT).await;
    let term = leadership.context();
    let lost = tokio::spawn(async move {
        term.lost().await;
        unix_nanos()
    });
    proxy.set_blackhole(true);
    let our_cut = unix_nanos();
    let ours_took_over = int(&contender.expect("leading", EVENT).await, "t");
    let ours_lost = tokio::time::timeout(EVENT, lost).await.unwrap().unwrap();
    contender.finish(Duration::from_secs(5)).await;
    drop(leadership);
    let ours = ours_lost < ours_took_over;

    verdict(
        "client-go split brain past the renew deadline",
        anchor,
        ours,
        &format!(
            "client-go: blackhole at 0, contender leads at {:.2} s, old leader's term ends at {:.2} s \
             (overlap {:.2} s); ours: blackhole at 0, our term lost at {:.2} s, contender leads at {:.2} s",
            secs(took_over - cut),
            secs(term_ended - cut),
            secs(overlap),
            secs(ours_lost - our_cut),
            secs(ours_took_over - our_cut),
        ),
    );
    println!(
        "client-go overlap {:.2} s; ours: lost {:.2} s before the contender led",
        secs(overlap),
        secs(ours_took_over - ours_lost)
    );
}
