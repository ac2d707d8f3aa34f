//! A ZooKeeper server's JVM, as every cluster of the harness starts it
//! (the loopback ensembles here and the members in network namespaces).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// Makes `cmd`, a `java` command, run the server configured by `config`:
/// no JVM options from the environment (they must not configure these
/// JVMs behind our back), a small heap, a dead peer's election port noticed
/// within a second, a member that found no quorum trying again at least
/// every 2 s (the election's back-off doubles up to 60 s by default), and
/// log lines stamped in UTC as etcd stamps them, so a
/// gap in a test's or campaign's history can be laid against the servers'
/// elections. `jvm_options` go before the main class.
pub fn server_command<'a>(
    cmd: &'a mut Command,
    classpath: &str,
    config: &Path,
    jvm_options: &[String],
) -> &'a mut Command {
    for var in [
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(["-Xmx160m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
        .args([
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.cnxTimeout=1000",
            "-Dzookeeper.fastleader.maxNotificationInterval=2000",
            "-Duser.timezone=UTC",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSX",
        ])
        .args(jvm_options)
        .arg("-cp")
        .arg(classpath)
        .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
        .arg(config.as_os_str() as &OsStr)
}
