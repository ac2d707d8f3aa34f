//! Which etcd release runs and where its binary is.

use super::*;

/// Which etcd release a cluster runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtcdVersion {
    /// etcd 3.4 from the Debian package `etcd-server` (`/usr/bin/etcd`).
    V3_4,
    /// etcd 3.6 (`ETCD_VERSION` in versions.env), built from source into the
    /// cache directory.
    V3_6,
}

impl EtcdVersion {
    /// Both supported releases, oldest first.
    pub const ALL: [EtcdVersion; 2] = [EtcdVersion::V3_4, EtcdVersion::V3_6];

    /// Where this release's binary lives when the cache is `cache`.
    pub fn binary_path_in(self, cache: &Path) -> PathBuf {
        match self {
            EtcdVersion::V3_4 => PathBuf::from("/usr/bin/etcd"),
            EtcdVersion::V3_6 => cache.join("bin").join(format!("etcd-v{}", etcd_release())),
        }
    }

    /// The binary under the cache directory `cache`, or
    /// [`HarnessError::MissingBinary`] (which says to run `scripts/test.sh`)
    /// when it is not installed.
    pub fn binary_in(self, cache: &Path) -> Result<PathBuf, HarnessError> {
        let path = self.binary_path_in(cache);
        if path.is_file() {
            Ok(path)
        } else {
            Err(HarnessError::MissingBinary {
                version: self,
                path,
            })
        }
    }

    /// The installed binary of this release (see [`cache_dir`]).
    pub fn binary(self) -> Result<PathBuf, HarnessError> {
        self.binary_in(&cache_dir())
    }
}

impl fmt::Display for EtcdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdVersion::V3_4 => f.write_str("etcd 3.4"),
            EtcdVersion::V3_6 => write!(f, "etcd {}", etcd_release()),
        }
    }
}
