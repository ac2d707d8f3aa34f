//! The machine's side of the harness: where the installers cache cluster
//! binaries, and which releases they are (read from `versions.env` at the
//! root of the repository, which the installers and docker-compose.yml read
//! too).

use std::path::{Path, PathBuf};

/// `versions.env`, compiled in: `KEY=VALUE` lines and `#` comments.
const VERSIONS: &str = include_str!("../../../versions.env");

/// The cache directory of installed cluster binaries:
/// `$FENCING_CACHE`, or `$HOME/.cache/fencing` when it is unset.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FENCING_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache").join("fencing")
}

/// The binary `name` in the cache's `bin` directory.
pub fn cached_bin(name: &str) -> PathBuf {
    cache_dir().join("bin").join(name)
}

/// A release pinned in `versions.env`, e.g. `release("ETCD_VERSION")` is
/// `"3.6.16"`.
///
/// # Panics
/// When the file has no such key: a mistake in the harness, which the unit
/// test below catches for every key the harness asks for.
pub fn release(key: &str) -> &'static str {
    VERSIONS
        .lines()
        .filter_map(|line| line.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim())
        .unwrap_or_else(|| panic!("versions.env has no {key}"))
}

/// etcd built from source (etcd 3.4 is Debian's).
pub fn etcd_release() -> &'static str {
    release("ETCD_VERSION")
}

/// ZooKeeper from Maven.
pub fn zookeeper_release() -> &'static str {
    release("ZOOKEEPER_VERSION")
}

/// The ZooKeeper of Debian's libzookeeper-java package.
pub fn zookeeper_debian_release() -> &'static str {
    release("ZOOKEEPER_DEBIAN_VERSION")
}

/// kube-apiserver built from source.
pub fn kubernetes_release() -> &'static str {
    release("KUBERNETES_VERSION")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_release_the_harness_reads_is_a_dotted_version() {
        for v in [
            etcd_release(),
            zookeeper_release(),
            zookeeper_debian_release(),
            kubernetes_release(),
        ] {
            let parts: Vec<&str> = v.split('.').collect();
            assert_eq!(parts.len(), 3, "{v:?}");
            assert!(parts.iter().all(|p| p.parse::<u32>().is_ok()), "{v:?}");
        }
    }

    #[test]
    #[should_panic(expected = "versions.env has no NO_SUCH_KEY")]
    fn an_unknown_key_is_a_loud_mistake() {
        release("NO_SUCH_KEY");
    }
}
