//! What a person sees when something is wrong: one readable line naming the
//! endpoint and the cause, no terminal colour codes in piped output, JSON
//! logs on request, and the portable lock-name rule.

mod common;

use std::net::TcpListener;
use std::process::Output;
use std::time::{Duration, Instant};

use common::fence;

/// A loopback port nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn run_true(source: &str, extra: &[&str]) -> Output {
    let mut args = vec!["run", "--source", source, "--lock", "jobs"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "true"]);
    fence().args(&args).output().expect("run fence")
}

/// Exit 1, one line on stderr, naming the endpoint and the cause, with no
/// debug dump of the client library's error types.
fn assert_unreachable(out: &Output, endpoint: &str, backend: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr}");
    for needle in [backend, endpoint, "connection refused", "check"] {
        assert!(stderr.contains(needle), "should name {needle:?}: {stderr}");
    }
    for noise in ["tonic", "ConnectError", "Os {", "source:", "\x1b["] {
        assert!(!stderr.contains(noise), "debug noise {noise:?}: {stderr}");
    }
}

#[test]
fn unreachable_etcd_is_one_line_naming_endpoint_and_cause() {
    let endpoint = format!("127.0.0.1:{}", closed_port());
    let started = Instant::now();
    let out = run_true(&format!("etcd://{endpoint}/locks?request_timeout=1"), &[]);
    assert_unreachable(&out, &endpoint, "cannot reach etcd");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn unreachable_zookeeper_is_one_line_naming_endpoint_and_cause() {
    let endpoint = format!("127.0.0.1:{}", closed_port());
    let out = run_true(&format!("zk://{endpoint}/locks?request_timeout=1"), &[]);
    assert_unreachable(&out, &endpoint, "cannot reach ZooKeeper");
}

#[test]
fn unreachable_apiserver_is_one_line_naming_endpoint_and_cause() {
    let endpoint = format!("127.0.0.1:{}", closed_port());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: k, cluster: {{server: \"https://{endpoint}\", insecure-skip-tls-verify: true}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\n\
             contexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n"
        ),
    )
    .unwrap();
    let source = format!(
        "kube://team?kubeconfig={}&request_timeout=2",
        kubeconfig.display()
    );
    let out = run_true(&source, &[]);
    assert_unreachable(&out, &endpoint, "cannot reach the Kubernetes apiserver");
}

#[test]
fn piped_logs_have_no_colour_codes_and_json_logs_are_json() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("local://{}", dir.path().display());
    // RUST_LOG=debug makes sure there are log lines to look at.
    let text = fence()
        .env("RUST_LOG", "debug")
        .args(["run", "--source", &source, "--lock", "jobs", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert!(text.status.success(), "{stderr}");
    assert!(stderr.contains("lock acquired"), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "ANSI codes in piped output: {stderr:?}"
    );

    let json = fence()
        .args([
            "--log-format",
            "json",
            "run",
            "--source",
            &source,
            "--lock",
            "jobs",
        ])
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&json.stderr);
    assert!(json.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(!lines.is_empty(), "the default filter logs the acquire");
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!("not JSON ({e}): {line}");
        });
        assert!(value.get("level").is_some(), "{line}");
    }
}

#[test]
fn lock_names_follow_the_portable_rule_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("local://{}", dir.path().display());
    for bad in ["Jobs", "a/b", "a_b", "a-", "a..b"] {
        common::assert_usage_error(
            &["run", "--source", &source, "--lock", bad, "--", "true"],
            "portable",
        );
    }
    let ok = fence()
        .args([
            "run",
            "--source",
            &source,
            "--lock",
            "team-7.jobs",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

/// However the URL spells its password (an encoded name, an encoded `=`,
/// the authority), `fence` neither prints it in its error nor logs it at
/// debug level: a URL refused while parsing (exit 2) and one that parses
/// but names a cluster nobody listens on (exit 1).
#[test]
fn no_spelling_of_a_password_leaks_into_errors_or_debug_logs() {
    let port = closed_port();
    let cases = [
        (
            "etcd://127.0.0.1:1/locks?user=u&pass%77ord=SECRET-7&bogus=1".to_owned(),
            2,
        ),
        (
            "zk://127.0.0.1:1/locks?user=u&PASS%57ORD=SECRET-7&ttl".to_owned(),
            2,
        ),
        ("etcd://127.0.0.1:1/locks?password%3DSECRET-7".to_owned(), 2),
        ("etcd://u:SECRET-7@127.0.0.1:1/locks".to_owned(), 2),
        ("etcd://u%3ASECRET-7@127.0.0.1:1/locks".to_owned(), 2),
        (
            format!("etcd://127.0.0.1:{port}/locks?request_timeout=1&user=u&pass%77ord=SECRET-7"),
            1,
        ),
        (
            format!("zk://127.0.0.1:{port}/locks?request_timeout=1&user=u&pass%77ord=SECRET-7"),
            1,
        ),
    ];
    for (url, code) in cases {
        let out = fence()
            .env("RUST_LOG", "debug")
            .args(["run", "--source", &url, "--lock", "jobs", "--", "true"])
            .output()
            .expect("run fence");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(code), "{url}: {text}");
        assert!(text.contains("--source"), "{url}: {text}");
        assert!(!text.contains("SECRET"), "{url}: {text}");
    }
}

/// A password in the source URL is never printed, in an error or in
/// `--help`; the URL can come from `FENCING_SOURCE_URL` instead of argv.
#[test]
fn passwords_stay_out_of_messages_and_argv() {
    let secret = "hunter2-in-argv";
    let url = format!("etcd://127.0.0.1:1/locks?user=u&password={secret}&bogus=1");
    let out = run_true(&url, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bogus") && !stderr.contains(secret),
        "{stderr}"
    );

    let out = fence()
        .args(["run", "--lock", "jobs", "--", "true"])
        .env("FENCING_SOURCE_URL", &url)
        .output()
        .expect("run fence");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "the env URL was used: {stderr}");
    assert!(
        stderr.contains("bogus") && !stderr.contains(secret),
        "{stderr}"
    );

    let help = fence()
        .args(["run", "--help"])
        .env("FENCING_SOURCE_URL", &url)
        .output()
        .expect("run fence");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("FENCING_SOURCE_URL") && !text.contains(secret),
        "{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = fence()
        .args([
            "run",
            "--lock",
            "jobs",
            "--",
            "sh",
            "-c",
            "echo $FENCING_TOKEN",
        ])
        .env(
            "FENCING_SOURCE_URL",
            format!("local://{}", dir.path().display()),
        )
        .output()
        .expect("run fence");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
}
