//! The JSON lines `fence elect` and `fence observe` print: one object per
//! change, flushed at once so a pipe reader sees it when it happens.

use std::io::Write;

use fencing::FencingToken;
use serde::Serialize;
use serde_json::{json, Value};

/// One line; `event` and `election` come first so the lines read well.
#[derive(Serialize)]
struct Line<'a> {
    event: &'a str,
    election: &'a str,
    #[serde(flatten)]
    fields: Value,
}

/// Prints one event line. Tokens are strings: they are 64-bit unsigned and
/// would lose precision as JSON numbers in many readers.
pub fn emit(event: &str, election: &str, fields: Value) {
    let line = Line {
        event,
        election,
        fields,
    };
    let Ok(line) = serde_json::to_string(&line) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    // A closed stdout (the reader went away) is not worth a panic; the
    // process carries on until it is stopped.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The fields naming a term.
pub fn term(identity: &str, token: FencingToken) -> Value {
    json!({ "identity": identity, "token": token.to_string() })
}
