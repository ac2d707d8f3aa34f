//! One campaign client process, as `run` starts it in its namespace:
//! opens its source with the cluster's gate and guarded write, plans its
//! holds from its seed, runs its workload ([`client::run`], or `fence run`
//! over and over) and closes the source before it exits.

use std::sync::Arc;
use std::time::Duration;

use fencing::{FencingSource, ResourceName};
use fencing_election::ElectionConfig;
use fencing_etcd::etcd_client::TxnOp;
use fencing_zookeeper::zookeeper_client::{self, Acls, CreateMode};

use super::client::{self, ClientPlan, ClusterGate, GateMaker, GuardedWrite};
use super::{coordinated, fence_run};

/// What `run` tells one client (the hidden `client` subcommand's flags).
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub name: String,
    pub source: String,
    /// The name the history gives the cluster gate's writes.
    pub gate: String,
    pub lock: String,
    pub ttl: Duration,
    pub seed: u64,
    /// A LeaderElector candidate rather than a lock user.
    pub elect: bool,
    /// `fence run` over and over rather than the library.
    pub fence_run: bool,
    /// Ignores the grant's loss and writes through the whole hold.
    pub careless: bool,
    /// A coordinated candidate (the source URL says so) in two elections
    /// at once: `lock`'s and this one's ([`crate::coordinated`]).
    pub coordinated: Option<String>,
}

/// Where the cluster gates keep their marks.
const GATE_PATH: &str = "/campaign-gates";
/// Where the guarded writes put their values: one key or node per lock.
const DATA_PATH: &str = "/campaign-data";
/// The gate names of the guarded writes in the history.
const GUARDED_ETCD: &str = "etcd-txn";
const GUARDED_ZK: &str = "zk-multi";

/// A client's source, the cluster's gate and the cluster's guarded write
/// (etcd and ZooKeeper; the others have neither).
struct Opened {
    source: Arc<dyn FencingSource>,
    gate: Option<GateMaker>,
    guarded: Option<(String, GuardedWrite)>,
}

async fn open(source: &str, lock: &ResourceName) -> Result<Opened, String> {
    let err = |e: fencing::Error| e.to_string();
    if source.starts_with("zk://") {
        let s = Arc::new(
            fencing_zookeeper::ZkSource::from_url(source)
                .await
                .map_err(err)?,
        );
        let maker = s.clone();
        let make: GateMaker = Arc::new(move || {
            let s = maker.clone();
            Box::pin(async move {
                let gate = s.gate(GATE_PATH).ok()?;
                Some(Arc::new(gate) as ClusterGate)
            })
        });
        let node = format!("{DATA_PATH}/{lock}");
        create_zk_node(&s, &node).await?;
        let writer = s.clone();
        let guarded: GuardedWrite = Arc::new(move |grant, value| {
            let (s, node) = (writer.clone(), node.clone());
            Box::pin(async move {
                let data = value.to_string();
                let set = |w: &mut zookeeper_client::MultiWriter<'_>| {
                    w.add_set_data(&node, data.as_bytes(), None)
                };
                s.guarded_multi(grant, set).await.map(drop)
            })
        });
        Ok(Opened {
            source: s,
            gate: Some(make),
            guarded: Some((GUARDED_ZK.to_owned(), guarded)),
        })
    } else if source.starts_with("etcd://") {
        let s = Arc::new(
            fencing_etcd::EtcdSource::from_url(source)
                .await
                .map_err(err)?,
        );
        let gate: ClusterGate = Arc::new(s.gate(GATE_PATH).map_err(err)?);
        let make: GateMaker = Arc::new(move || {
            let gate = gate.clone();
            Box::pin(async move { Some(gate) })
        });
        let key = format!("{DATA_PATH}/{lock}");
        let writer = s.clone();
        let guarded: GuardedWrite = Arc::new(move |grant, value| {
            let (s, put) = (
                writer.clone(),
                TxnOp::put(key.as_str(), value.to_string(), None),
            );
            Box::pin(async move { s.guarded_txn(grant, vec![put]).await.map(drop) })
        });
        Ok(Opened {
            source: s,
            gate: Some(make),
            guarded: Some((GUARDED_ETCD.to_owned(), guarded)),
        })
    } else {
        Ok(Opened {
            source: fencing::connect(source).await.map_err(err)?,
            gate: None,
            guarded: None,
        })
    }
}

/// The node a guarded multi sets: it must exist (a set of a missing node
/// fails the multi, which would read as a backend error).
async fn create_zk_node(s: &fencing_zookeeper::ZkSource, node: &str) -> Result<(), String> {
    let client = s.client().await.map_err(|e| e.to_string())?;
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let made = tokio::time::timeout(Duration::from_secs(5), client.mkdir(node, &options)).await;
    match made {
        Ok(Ok(())) | Ok(Err(zookeeper_client::Error::NodeExists)) => Ok(()),
        Ok(Err(e)) => Err(format!("creating {node}: {e}")),
        Err(_) => Err(format!("creating {node}: timed out")),
    }
}

/// Short holds, and sometimes a long one: long enough, at the top, to
/// outlast a lease, so that a holder cut off in one is taken over while it
/// still holds.
fn plan(resource: ResourceName, ttl: Duration, seed: u64) -> ClientPlan {
    ClientPlan {
        resource,
        ttl,
        acquire_wait: Duration::from_secs(5),
        hold: (Duration::from_millis(10), Duration::from_millis(150)),
        long_hold_percent: 5,
        long_hold: (
            Duration::from_millis(1000),
            (ttl * 5 / 2).max(Duration::from_secs(3)),
        ),
        write_every: WRITE_EVERY,
        seed,
        careless: false,
        holder: None,
        stand_between_holds: false,
        step_out_one_in: 0,
        step_out: (Duration::ZERO, Duration::ZERO),
    }
}

/// A coordinated term's usual length: longer than the lock workload's
/// 10-150 ms, so that a better candidate coming back meets a holder (which
/// then yields) more often than the half second between the controller's
/// naming of a holder and its take, where it stalls the Lease instead (see
/// [`ClientPlan::stand_between_holds`]); not so long that a two-minute run
/// falls short of its grants (200-1500 ms made 39 in 100 s, this 60-75).
const COORDINATED_HOLD: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_millis(800));

/// How long a coordinated candidate that steps out stays out: past the
/// next best one's election and take (about half a second).
const COORDINATED_BREAK: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(3));

/// The plans of client `name`'s two coordinated elections, on `lock` and
/// `second`, each under its own identity and seed.
fn coordinated_plans(
    name: &str,
    plan: ClientPlan,
    second: &str,
) -> Result<Vec<ClientPlan>, String> {
    let second = ResourceName::new(second).map_err(|e| format!("{name}: {e}"))?;
    let resources = [plan.resource.clone(), second];
    let plans = resources
        .into_iter()
        .enumerate()
        .map(|(k, resource)| ClientPlan {
            resource,
            holder: Some(coordinated::identity(name, k)),
            seed: plan.seed ^ ((k as u64) << 48),
            hold: COORDINATED_HOLD,
            stand_between_holds: true,
            step_out_one_in: 4,
            step_out: COORDINATED_BREAK,
            ..plan.clone()
        })
        .collect();
    Ok(plans)
}

/// How long a stopping client waits for its source to close.
const CLOSE_LIMIT: Duration = Duration::from_secs(3);

/// How often a holder writes.
pub const WRITE_EVERY: Duration = Duration::from_millis(25);

/// Runs one client until `run` stops it (closes its stdin); an error only
/// for what it cannot start with.
pub async fn run_client(args: ClientOptions) -> Result<(), String> {
    let name = args.name;
    let resource = ResourceName::new(args.lock).map_err(|e| format!("{name}: {e}"))?;
    let mut plan = plan(resource, args.ttl, args.seed);
    if args.careless {
        // Long holds as often as an anchor's: only a hold that outlasts
        // its lease makes late writes.
        plan.careless = true;
        plan.long_hold_percent = 20;
    }
    if args.fence_run {
        return fence_run_client(name, args.source, plan).await;
    }
    // A client that cannot connect yet (its member down) keeps trying: the
    // campaign decides when it stops.
    let opened = loop {
        match open(&args.source, &plan.resource).await {
            Ok(opened) => break opened,
            Err(e) => {
                eprintln!("{name}: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let gate = opened.gate.map(|g| (args.gate, g));
    // The lease is the session; a leader steps down at 3/4 of it, well
    // after the renewal at 1/3 (the elector refuses less than 1.2 x that).
    let election = args.elect.then(|| {
        ElectionConfig::new(name.as_str())
            .lease_duration(plan.ttl)
            .renew_deadline(plan.ttl * 3 / 4)
            .retry_period(plan.ttl / 2)
    });
    let plans = match &args.coordinated {
        Some(second) => coordinated_plans(&name, plan, second)?,
        None => vec![plan],
    };
    let source = opened.source.clone();
    client::run(opened.source, gate, opened.guarded, plans, election).await;
    // Ends the sessions, and on Kubernetes waits until an acquire cut off
    // by the stop has given back the Lease its write may have taken.
    if let Err(e) = tokio::time::timeout(CLOSE_LIMIT, source.close()).await {
        eprintln!("{name}: close: {e}");
    }
    Ok(())
}

/// A client of the `fence run` workload: `fence` is the CLI built beside
/// this binary.
async fn fence_run_client(name: String, source: String, plan: ClientPlan) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("{name}: {e}"))?;
    // Four times the library clients' share of long holds: a `fence run`
    // costs a process start per grant anyway, and only a long hold can be
    // cut off and outlive its lease (the case its kill rule is for).
    let plan = ClientPlan {
        long_hold_percent: plan.long_hold_percent * 4,
        ..plan
    };
    let wrapper = fence_run::Wrapper {
        fence: exe.with_file_name("fence"),
        socket: fence_run::socket_path(&name),
        exe,
        source,
        plan,
    };
    let socket = wrapper.socket.clone();
    let outcome = fence_run::run_wrapper(wrapper).await;
    let _ = std::fs::remove_file(socket);
    outcome.map_err(|e| format!("{name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinated_client_stands_in_two_elections_under_two_identities() {
        let first = ResourceName::new("campaign-a").unwrap();
        let base = plan(first, Duration::from_secs(2), 7);
        let plans = coordinated_plans("c2", base, "campaign-b").unwrap();
        let what: Vec<(&str, Option<&str>)> = plans
            .iter()
            .map(|p| (p.resource.as_str(), p.holder.as_deref()))
            .collect();
        assert_eq!(
            what,
            [("campaign-a", Some("c2-a")), ("campaign-b", Some("c2-b"))]
        );
        assert_ne!(plans[0].seed, plans[1].seed);
        for p in &plans {
            assert!(p.stand_between_holds && p.step_out_one_in > 0);
            assert_eq!(p.hold, COORDINATED_HOLD);
        }
        let base = plan(
            ResourceName::new("campaign-a").unwrap(),
            Duration::from_secs(2),
            7,
        );
        assert!(coordinated_plans("c2", base, "Not A Lock").is_err());
    }
}
