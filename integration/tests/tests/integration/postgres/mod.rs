//! PostgreSQL servers: the storage-side gates, and PgSource.

mod gate;
mod harness_self_test;
mod source;
