//! PostgreSQL for `fencing`: a coordinator that mints tokens
//! ([`PgSource`]), and gates whose check lives in the database that takes
//! the writes, in the same transaction as the write.
//!
//! - [`PgSource`]: locks and leases with fencing tokens in one table, for
//!   applications that run PostgreSQL and no etcd, ZooKeeper or
//!   Kubernetes; [`PgSource::guard`] checks a lock inside the transaction
//!   of a write.
//! - [`FencedUpdate`]: a fence column on your own table; the write and the
//!   check are one `UPDATE ... WHERE fence <= $token`, one round trip.
//! - [`FenceTable`]: a table of marks advanced inside your transaction, for
//!   writes that do not fit one UPDATE (several rows, inserts, other tables).
//! - [`PgGate`]: a [`Gate`](fencing_core::Gate) kept in PostgreSQL, for
//!   stores that check elsewhere and want durable marks.
//!
//! `tokio-postgres` is used directly: it is async, has no runtime of its own
//! beyond tokio, keeps prepared statements explicit (one round trip per
//! guarded write), and is what `sqlx` and `deadpool` users can reach through
//! their connections too.

#![cfg_attr(docsrs, feature(doc_cfg))]
mod column;
mod config;
mod gate;
mod ident;
mod lock_table;
mod source;
mod table;

pub use column::{FencedUpdate, PreparedUpdate};
pub use config::{PgConfig, DEFAULT_REQUEST_TIMEOUT, DEFAULT_TABLE, DEFAULT_TTL};
pub use gate::PgGate;
pub use source::{PgSource, MIN_TTL};
pub use table::FenceTable;

/// The client crate.
pub use tokio_postgres;

use fencing_core::Error;

/// Maps a PostgreSQL error: missing privileges and failed logins become
/// [`Error::PermissionDenied`], everything else [`Error::Backend`]. A
/// server's error is named by its severity, SQLSTATE code and message
/// (the client crate's own text for it is only "db error").
#[must_use]
pub fn pg_error(e: tokio_postgres::Error) -> Error {
    use tokio_postgres::error::SqlState;
    let context = match e.as_db_error() {
        Some(db) => format!(
            "PostgreSQL {} {}: {}",
            db.severity(),
            db.code().code(),
            db.message()
        ),
        None => "PostgreSQL".to_owned(),
    };
    match e.code() {
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE || c.code().starts_with("28") => {
            Error::PermissionDenied(format!("{context} ({e})"))
        }
        _ => Error::backend(context, e),
    }
}
