//! The files and resources a server needs: its JAAS file, `java`, ports.

use super::*;

/// A JAAS configuration whose `Server` section accepts `users` with
/// DIGEST-MD5.
pub(super) fn jaas_config(users: &[(String, String)]) -> String {
    let mut jaas =
        String::from("Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required");
    for (name, password) in users {
        jaas.push_str(&format!("\n    user_{name}=\"{password}\""));
    }
    jaas.push_str(";\n};\n");
    jaas
}

pub(super) fn write_file(path: &Path, contents: &str) -> Result<(), ZkHarnessError> {
    fs::write(path, contents)
        .map_err(|e| ZkHarnessError::io(format!("writing {}", path.display()), e))
}

/// The `java` to run: `$JAVA_HOME/bin/java` if that exists, else the first
/// `java` on `PATH`.
pub(crate) fn find_java() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME").filter(|h| !h.is_empty()) {
        let java = Path::new(&home).join("bin").join("java");
        if java.is_file() {
            return Some(java);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("java"))
        .find(|java| java.is_file())
}
pub(super) fn free_ports(n: usize) -> Result<Vec<u16>, ZkHarnessError> {
    crate::ports::free_ports(n).map_err(|e| ZkHarnessError::io("finding free loopback ports", e))
}
