//! Runnable examples; see the `[[example]]` and `[[bin]]` entries in
//! Cargo.toml.
//!
//! The library holds what the examples share ([`FileStore`], the storage
//! side) and compiles the code blocks of the repository README as doctests.

mod file_store;

pub use file_store::{Accepted, FileStore};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
