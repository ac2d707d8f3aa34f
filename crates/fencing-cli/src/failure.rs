//! How a `fence` command fails: one line of text and an exit code.

use std::fmt;

/// Exit code for a failure at run time (a child died, a wait timed out).
pub const RUNTIME: u8 = 1;
/// Exit code for a mistake on the command line or in configuration.
pub const USAGE: u8 = 2;

#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: USAGE,
            message: message.into(),
        }
    }

    pub fn runtime(message: impl Into<String>) -> Self {
        Failure {
            code: RUNTIME,
            message: message.into(),
        }
    }

    /// The message folded onto one line, since callers grep stderr by line.
    pub fn one_line(&self) -> String {
        self.message
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

pub type Result<T, E = Failure> = std::result::Result<T, E>;
