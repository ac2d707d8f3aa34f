//! PostgreSQL: a throwaway server for the storage-side gate tests, and the
//! lock table of `PgSource` on it.

pub mod fixture;
pub mod server;
