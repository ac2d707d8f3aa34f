//! A controller-style leader: several replicas run, one reconciles at a
//! time, and every write it makes carries its term's fencing token, so a
//! replica paused past its lease cannot overwrite its successor's work.
//! The backend is chosen by the URL alone.
//!
//! Run (start two or three in separate terminals):
//! ```text
//!   cargo run -p fencing-examples --bin leader-controller -- URL IDENTITY STORE_DIR [WRITES]
//!   URL: local:///tmp/fence-state, etcd://127.0.0.1:2379/fencing, zk://127.0.0.1:2181/fencing,
//!        kube://default?kubeconfig=PATH
//! ```
//!
//! Each replica makes WRITES (default 10) accepted writes as leader, then
//! resigns and exits. `--pause-before-write N` (after the other arguments)
//! freezes the process with SIGSTOP right before its Nth write, to replay
//! the paused-leader timeline: resumed with SIGCONT, the write carries an
//! old term's token and the store refuses it.
//!
//! Prints: `LEADER <token>`, `WROTE <n> <token>`, `FENCED <error>`, `LOST <reason>`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fencing::election::{ElectionConfig, LeaderContext, LeaderElector};
use fencing::{Error, ResourceName, Result};
use fencing_examples::FileStore;

struct Replica {
    store: FileStore,
    state: ResourceName,
    /// Writes accepted so far, across terms.
    written: AtomicUsize,
    goal: usize,
    /// Attempt number before which to freeze (0: never).
    pause_before: usize,
    attempts: AtomicUsize,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leader-controller: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        Error::Config(
            "usage: leader-controller URL IDENTITY STORE_DIR [WRITES] [--pause-before-write N]"
                .into(),
        )
    };
    let (positional, pause) = match args.iter().position(|a| a == "--pause-before-write") {
        Some(i) => (
            &args[..i],
            args.get(i + 1)
                .ok_or_else(usage)?
                .parse()
                .map_err(|_| usage())?,
        ),
        None => (&args[..], 0),
    };
    let [url, identity, dir, rest @ ..] = positional else {
        return Err(usage());
    };
    let goal = rest
        .first()
        .map_or(Ok(10), |w| w.parse().map_err(|_| usage()))?;

    // Short timings so the example reacts quickly; production code keeps
    // client-go's defaults (15 s / 10 s / 2 s) unless it knows better.
    let config = ElectionConfig::new(identity.as_str())
        .lease_duration(Duration::from_secs(3))
        .renew_deadline(Duration::from_secs(2))
        .retry_period(Duration::from_millis(500));
    let elector = LeaderElector::new(
        fencing::connect(url).await?,
        ResourceName::new("controller")?,
        config,
    )?;
    let replica = Replica {
        store: FileStore::open(dir)?,
        state: ResourceName::new("desired-state")?,
        written: AtomicUsize::new(0),
        goal,
        pause_before: pause,
        attempts: AtomicUsize::new(0),
    };

    while replica.written.load(Ordering::SeqCst) < goal {
        match elector.run(|leader| replica.reconcile(leader)).await {
            Ok(Ok(())) => {}
            // The store refused our token: a newer leader exists. Stop
            // acting and campaign again, never retry the write as is.
            Ok(Err(e)) if e.needs_reacquire() => println!("FENCED {e}"),
            Err(e) if e.needs_reacquire() => println!("LOST {e}"),
            Ok(Err(e)) | Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Replica {
    /// The leader's loop: one write per tick until the goal is met. `run`
    /// drops this future as soon as leadership may be lost.
    async fn reconcile(&self, leader: LeaderContext) -> Result<()> {
        println!("LEADER {}", leader.token());
        while self.written.load(Ordering::SeqCst) < self.goal {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let attempt = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
            if attempt == self.pause_before {
                freeze();
            }
            let n = self.written.load(Ordering::SeqCst) + 1;
            let value = format!("replicas=3 written-by={} n={n}", leader.identity());
            self.store
                .write(&self.state, leader.token(), leader.identity(), &value)
                .await?;
            self.written.fetch_add(1, Ordering::SeqCst);
            println!("WROTE {n} {}", leader.token());
        }
        Ok(())
    }
}

/// Stops this whole process, as a long GC pause or a VM migration would,
/// in the worst place: after the leadership check, before the write.
fn freeze() {
    println!("FREEZING");
    let me = rustix::process::getpid();
    let _ = rustix::process::kill_process(me, rustix::process::Signal::STOP);
}
