//! Runs the real `fence` binary, children and all.

use std::process::{Command, Output};

fn fence(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fence"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run fence")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines of one run, from its header up to the next header or the end.
fn section<'a>(stdout: &'a str, header: &str) -> Vec<&'a str> {
    let start = stdout
        .find(header)
        .unwrap_or_else(|| panic!("no {header:?} in:\n{stdout}"));
    let rest = &stdout[start + header.len()..];
    let end = rest.find("\n--- ").unwrap_or(rest.len());
    rest[..end].lines().collect()
}

/// The number after `marker` on the first line holding `line_has`.
fn number_after(lines: &[&str], line_has: &str, marker: &str) -> u64 {
    let line = lines
        .iter()
        .find(|l| l.contains(line_has))
        .unwrap_or_else(|| panic!("no line with {line_has:?}"));
    let tail = &line[line
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in {line:?}"))
        + marker.len()..];
    tail.chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

fn assert_demo_passed(out: &Output) {
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );

    let off = section(&stdout, "--- gate OFF");
    let c1 = number_after(&off, "C1 (pid", "token ");
    assert!(
        off.iter()
            .any(|l| l.contains(&format!("C1 writes value=1 with token {c1} -> accepted"))),
        "the ungated run should accept C1's stale write:\n{stdout}"
    );
    assert!(off.contains(&"final value: 1"), "{stdout}");

    let on = section(&stdout, "--- gate ON");
    let c1 = number_after(&on, "C1 (pid", "token ");
    let c2 = number_after(&on, "C2 (pid", "token ");
    assert!(c2 > c1, "C2 must get a higher token than C1:\n{stdout}");
    let rejected =
        format!("C1 writes value=1 with token {c1} -> REJECTED (presented {c1} < highest {c2})");
    assert!(
        on.iter().any(|l| l.contains(&rejected)),
        "missing {rejected:?} in:\n{stdout}"
    );
    assert!(on.contains(&"final value: 100"), "{stdout}");
    assert!(
        !on.iter()
            .any(|l| l.contains("-> accepted: C2's value=100 is destroyed")),
        "{stdout}"
    );
}

#[test]
fn demo_loses_the_update_without_a_gate_and_fences_it_with_one() {
    assert_demo_passed(&fence(&["demo"]));
}

#[test]
fn demo_runs_on_a_given_local_source_directory() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let url = format!("local://{}", state.display());
    let out = fence(&["demo", "--source", &url, "--ttl-ms", "400"]);
    assert_demo_passed(&out);
    assert!(
        state.join("counter").is_file(),
        "the demo should have used {}",
        state.display()
    );

    // Tokens carry on from the first demo in the same directory.
    let again = fence(&["demo", "--source", &url, "--ttl-ms", "400"]);
    assert_demo_passed(&again);
    let first_c1 = number_after(
        &section(&text(&again.stdout), "--- gate OFF"),
        "C1 (pid",
        "token ",
    );
    assert!(
        first_c1 > 4,
        "a reused source must keep counting, got token {first_c1}"
    );
}

/// A usage error: exit 2, nothing on stdout, one line on stderr.
fn assert_usage_error(args: &[&str], expect: &str) {
    let out = fence(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?} should print one line, got:\n{stderr}"
    );
    assert!(
        stderr.contains(expect),
        "{args:?}: {stderr:?} lacks {expect:?}"
    );
    assert!(
        out.stdout.is_empty(),
        "{args:?} printed to stdout: {}",
        text(&out.stdout)
    );
}

#[test]
fn malformed_and_unknown_sources_are_usage_errors() {
    assert_usage_error(&["demo", "--source", "nonsense"], "no scheme");
    assert_usage_error(
        &["demo", "--source", "redis://localhost"],
        "unknown scheme \"redis\"",
    );
    assert_usage_error(&["demo", "--source", "local://"], "names no directory");
    assert_usage_error(&["demo", "--source", "local:///tmp/x?ttl=soon"], "ttl=soon");
}

#[test]
fn bad_ttl_and_unknown_arguments_are_usage_errors() {
    assert_usage_error(&["demo", "--ttl-ms", "100"], "--ttl-ms");
    assert_usage_error(&["demo", "--ttl-ms", "soon"], "--ttl-ms");
    assert_usage_error(&["demo", "--frobnicate"], "--frobnicate");
    assert_usage_error(&["demo-client", "--source", "x"], "--lock");
}

#[test]
fn help_shows_examples() {
    for args in [&["--help"][..], &["demo", "--help"][..]] {
        let out = fence(args);
        assert_eq!(out.status.code(), Some(0));
        let stdout = text(&out.stdout);
        assert!(
            stdout.contains("Examples:") && stdout.contains("fence demo --ttl-ms"),
            "{stdout}"
        );
        assert!(
            !stdout.contains("demo-client"),
            "the child subcommand should stay hidden:\n{stdout}"
        );
    }
}
