//! Runnable examples; see the `[[example]]` entries in Cargo.toml.
//!
//! This library exists so that the code blocks in the repository README are
//! compiled and run as doctests.

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
