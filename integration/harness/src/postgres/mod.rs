//! PostgreSQL: a throwaway server for the storage-side gate tests.

pub mod server;
