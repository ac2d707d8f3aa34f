//! The anchor client of the lock workload: a lock implementation that is
//! not this crate's (Go's `concurrency.Mutex` on etcd, Curator's
//! `InterProcessMutex` on ZooKeeper, client-go's leader election on
//! Kubernetes), contending for the same locks as the Rust clients.

use std::path::PathBuf;
use std::time::Duration;

use super::{Config, Workload};
use fencing_harness::namespaced::Kind;

/// The anchor's binary (a jar for Curator), checked to exist, if the
/// campaign has one: Go's `concurrency.Mutex` on etcd, Curator's
/// `InterProcessMutex` on ZooKeeper, client-go's leader election on
/// Kubernetes.
pub(super) fn anchor_binary(cfg: &Config) -> Result<Option<PathBuf>, String> {
    if !cfg.anchor {
        return Ok(None);
    }
    if cfg.workload != Workload::Lock {
        return Err("an anchor client runs only with the lock workload".into());
    }
    let (name, installer) = match cfg.kind {
        Kind::Etcd(_) => ("etcd-mutex", "go-interop.sh"),
        Kind::Zk(_) => ("curator-mutex.jar", "curator-interop.sh"),
        Kind::Kube => ("client-go-elector", "client-go-interop.sh"),
        Kind::Local | Kind::Pg => {
            return Err("an anchor client runs only on etcd, ZooKeeper or Kubernetes".into())
        }
    };
    let binary = fencing_harness::cache::cached_bin(name);
    if !binary.is_file() {
        return Err(format!(
            "{} is missing (the anchor client): run scripts/install/{installer}",
            binary.display()
        ));
    }
    Ok(Some(binary))
}

/// The program and arguments of the anchor `binary` (see [`anchor_binary`])
/// named `name` on the lock of the source `url`: its `campaign` subcommand.
pub(super) fn anchor_args(
    binary: &std::path::Path,
    name: &str,
    url: &str,
    lock: &str,
    ttl: Duration,
    seed: u64,
) -> Result<(PathBuf, Vec<String>), String> {
    let wrong = || {
        format!(
            "the anchor {} cannot use the source {url}",
            binary.display()
        )
    };
    // scheme://target?query, the target split at its first '/'.
    let (scheme, rest) = url.split_once("://").ok_or_else(wrong)?;
    let (target, query) = rest.split_once('?').unwrap_or((rest, ""));
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    // Go's rand takes an int64 seed; so does java.util.Random.
    let seed = (seed >> 1).to_string();
    let is_jar = binary.extension().is_some_and(|e| e == "jar");
    let (program, mut args): (PathBuf, Vec<String>) = match (scheme, is_jar) {
        ("etcd", false) => {
            let (hosts, prefix) = target.split_once('/').ok_or_else(wrong)?;
            let ttl = ttl.as_secs().max(1).to_string();
            let args = [
                "campaign",
                "--endpoints",
                hosts,
                "--prefix",
                &format!("/{prefix}"),
                "--lock",
                lock,
                "--ttl",
                &ttl,
            ];
            (binary.into(), args.map(str::to_owned).to_vec())
        }
        ("zk", true) => {
            // ZkSource's lock node parent: PATH/RESOURCE.
            let (hosts, path) = target.split_once('/').ok_or_else(wrong)?;
            let session = ttl.as_millis().max(1).to_string();
            let jvm = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx128m"];
            let jar = binary.to_str().ok_or_else(wrong)?;
            let args = [
                "-jar",
                jar,
                "campaign",
                "--connect",
                hosts,
                "--path",
                &format!("/{path}/{lock}"),
                "--lock",
                lock,
                "--session-timeout-ms",
                &session,
            ];
            let args = jvm.into_iter().chain(args).map(str::to_owned).collect();
            ("java".into(), args)
        }
        ("kube", false) => {
            // The Lease is the lock's name in the URL's namespace; the TTL
            // is whole seconds, as KubeLeaseSource writes it.
            let kubeconfig = param("kubeconfig").ok_or_else(wrong)?;
            let timeout = param("timeout")
                .and_then(|t| t.parse::<f64>().ok())
                .map_or(Duration::from_secs(1), Duration::from_secs_f64);
            let lease = Duration::from_secs(ttl.as_secs().max(1));
            let args = [
                "campaign",
                "--kubeconfig",
                kubeconfig,
                "--namespace",
                target.trim_end_matches('/'),
                "--lock",
                lock,
                "--name",
                name,
                "--ttl-ms",
                &lease.as_millis().to_string(),
                "--timeout-ms",
                &timeout.as_millis().max(1).to_string(),
            ];
            (binary.into(), args.map(str::to_owned).to_vec())
        }
        _ => return Err(wrong()),
    };
    let long_hold = (ttl * 5 / 2)
        .max(Duration::from_secs(3))
        .as_millis()
        .to_string();
    args.extend(
        ["--seed", &seed]
            .into_iter()
            // Long holds four times as often as a Rust client's: only a
            // hold that outlasts its lease shows what an anchor gets wrong.
            .chain(["--long-hold-ms", &long_hold, "--long-percent", "20"])
            .map(str::to_owned),
    );
    Ok((program, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchor_args_follow_each_source() {
        let ttl = Duration::from_secs(1);
        let (program, args) = anchor_args(
            "/c/bin/curator-mutex.jar".as_ref(),
            "curator4",
            "zk://10.0.0.1:2181,10.0.0.2:2181/campaign?ttl=1&request_timeout=1",
            "campaign-b",
            ttl,
            6,
        )
        .unwrap();
        assert_eq!(program, PathBuf::from("java"));
        let joined = args.join(" ");
        assert!(
            joined.contains(
                "-jar /c/bin/curator-mutex.jar campaign --connect 10.0.0.1:2181,10.0.0.2:2181 \
                 --path /campaign/campaign-b --lock campaign-b --session-timeout-ms 1000 --seed 3"
            ),
            "{joined}"
        );

        let (program, args) = anchor_args(
            "/c/bin/client-go-elector".as_ref(),
            "clientgo4",
            "kube://default?kubeconfig=/o/kubeconfig.yaml&ttl=2&request_timeout=1",
            "campaign-b",
            Duration::from_secs(2),
            6,
        )
        .unwrap();
        assert_eq!(program, PathBuf::from("/c/bin/client-go-elector"));
        assert_eq!(
            args.join(" "),
            "campaign --kubeconfig /o/kubeconfig.yaml --namespace default --lock campaign-b \
             --name clientgo4 --ttl-ms 2000 --timeout-ms 1000 --seed 3 --long-hold-ms 5000 \
             --long-percent 20"
        );

        let (_, args) = anchor_args(
            "/c/bin/etcd-mutex".as_ref(),
            "go4",
            "etcd://10.0.0.1:2379/campaign?ttl=2&request_timeout=1",
            "campaign-b",
            Duration::from_secs(2),
            6,
        )
        .unwrap();
        assert_eq!(
            args.join(" "),
            "campaign --endpoints 10.0.0.1:2379 --prefix /campaign --lock campaign-b --ttl 2 \
             --seed 3 --long-hold-ms 5000 --long-percent 20"
        );

        // A binary on another backend's source is refused.
        assert!(anchor_args(
            "/c/bin/etcd-mutex".as_ref(),
            "go4",
            "zk://h:2181/campaign",
            "campaign-b",
            ttl,
            6
        )
        .is_err());
    }
}
