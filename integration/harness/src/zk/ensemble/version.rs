//! Which ZooKeeper release runs, where its jars are, and a server's mode.

use super::*;

/// Which ZooKeeper release an ensemble runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ZkVersion {
    /// ZooKeeper 3.8 from the Debian package `libzookeeper-java`.
    V3_8,
    /// ZooKeeper 3.9 (`ZOOKEEPER_VERSION` in versions.env) from Maven
    /// Central, in the cache directory.
    V3_9,
}

impl ZkVersion {
    /// Both supported releases, oldest first.
    pub const ALL: [ZkVersion; 2] = [ZkVersion::V3_8, ZkVersion::V3_9];

    /// The release number, e.g. `"3.8.0"`, as `srvr` reports it.
    pub fn release(self) -> &'static str {
        match self {
            ZkVersion::V3_8 => zookeeper_debian_release(),
            ZkVersion::V3_9 => zookeeper_release(),
        }
    }

    /// Where the 3.9 jars live when the cache is `cache`.
    pub fn lib_dir_in(cache: &Path) -> PathBuf {
        cache
            .join(format!("zookeeper-{}", zookeeper_release()))
            .join("lib")
    }

    /// The server classpath of this release, with the cache directory
    /// `cache` (3.8 ignores it), or [`ZkHarnessError::MissingInstall`]
    /// (which says to run `scripts/test.sh`) when a jar is missing.
    pub fn classpath_in(self, cache: &Path) -> Result<String, ZkHarnessError> {
        let jars: Vec<PathBuf> = match self {
            ZkVersion::V3_8 => ZK38_JARS
                .iter()
                .map(|jar| Path::new(DEBIAN_JAVA_DIR).join(jar))
                .collect(),
            ZkVersion::V3_9 => {
                let lib = Self::lib_dir_in(cache);
                let stamp = lib.join(STAMP);
                let list =
                    fs::read_to_string(&stamp).map_err(|_| ZkHarnessError::MissingInstall {
                        version: self,
                        path: stamp.clone(),
                    })?;
                list.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(|jar| lib.join(jar))
                    .collect()
            }
        };
        if jars.is_empty() {
            return Err(ZkHarnessError::MissingInstall {
                version: self,
                path: Self::lib_dir_in(cache),
            });
        }
        let mut classpath = Vec::with_capacity(jars.len());
        for jar in jars {
            if !jar.is_file() {
                return Err(ZkHarnessError::MissingInstall {
                    version: self,
                    path: jar,
                });
            }
            classpath.push(jar.to_string_lossy().into_owned());
        }
        Ok(classpath.join(":"))
    }

    /// The server classpath of this installed release (see [`cache_dir`]).
    pub fn classpath(self) -> Result<String, ZkHarnessError> {
        self.classpath_in(&cache_dir())
    }
}

impl fmt::Display for ZkVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ZooKeeper {}", self.release())
    }
}

/// The role a server reports in its `srvr` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ZkMode {
    /// The ensemble's elected leader.
    Leader,
    /// A follower synchronised with the leader.
    Follower,
    /// A non-voting observer.
    Observer,
    /// A single server without an ensemble.
    Standalone,
}

impl ZkMode {
    pub(super) fn parse(s: &str) -> Option<ZkMode> {
        match s.trim() {
            "leader" => Some(ZkMode::Leader),
            "follower" => Some(ZkMode::Follower),
            "observer" => Some(ZkMode::Observer),
            "standalone" => Some(ZkMode::Standalone),
            _ => None,
        }
    }
}
