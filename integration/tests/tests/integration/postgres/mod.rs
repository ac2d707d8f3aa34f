//! PostgreSQL servers for the storage-side gates.

mod gate;
mod harness_self_test;
