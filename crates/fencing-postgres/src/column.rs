//! A fence column on the application's own table: the guarded write and
//! the check are one UPDATE.

use fencing_core::{Error, FencingToken, Result};
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Statement};

use crate::ident::Ident;

/// An `UPDATE` of one row of the application's table that only applies
/// when the row's fence column is not above the token, and sets it to the
/// token: `UPDATE t SET c1 = $3, ..., fence = $2 WHERE key = $1 AND fence <= $2`.
///
/// A write that passes is one statement, one round trip. A refused update
/// reports [`Error::Stale`] with the row's fence, read by a second query on
/// that path only.
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client, token: fencing_core::FencingToken) -> fencing_core::Result<()> {
/// use fencing_postgres::FencedUpdate;
///
/// // accounts(id BIGINT PRIMARY KEY, balance BIGINT, fence BIGINT NOT NULL DEFAULT 0)
/// let update = FencedUpdate::new("accounts", "id", "fence", &["balance"])?.prepare(client).await?;
/// let id: i64 = 7;
/// let balance: i64 = 100;
/// update.execute(client, &id, &[&balance], token).await?; // Err(Stale) if superseded
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct FencedUpdate {
    sql: String,
    refetch: String,
    columns: usize,
}

impl FencedUpdate {
    /// Builds the statement for `table`, keyed by `key_column`, fenced by
    /// `fence_column` (a `BIGINT`), setting `columns` in that order.
    pub fn new(
        table: &str,
        key_column: &str,
        fence_column: &str,
        columns: &[&str],
    ) -> Result<Self> {
        let (t, k, f) = (
            Ident::new(table)?.sql(),
            Ident::new(key_column)?.sql(),
            Ident::new(fence_column)?.sql(),
        );
        let mut sets = Vec::with_capacity(columns.len() + 1);
        for (i, c) in columns.iter().enumerate() {
            sets.push(format!("{} = ${}", Ident::new(c)?.sql(), i + 3));
        }
        sets.push(format!("{f} = $2"));
        // A write that passes is this one statement; only a refused update
        // costs a second round trip, to read the fence that refused it.
        let sql = format!(
            "UPDATE {t} SET {} WHERE {k} = $1 AND {f} <= $2",
            sets.join(", ")
        );
        Ok(FencedUpdate {
            sql,
            refetch: format!("SELECT {f} FROM {t} WHERE {k} = $1"),
            columns: columns.len(),
        })
    }

    /// The statement text (parameters: key, token, then the columns).
    #[must_use]
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Prepares it on a connection, once; executions are then one round trip.
    pub async fn prepare(&self, client: &impl GenericClient) -> Result<PreparedUpdate> {
        Ok(PreparedUpdate {
            statement: client.prepare(&self.sql).await.map_err(crate::pg_error)?,
            refetch: self.refetch.clone(),
            columns: self.columns,
        })
    }
}

/// A [`FencedUpdate`] prepared on one connection.
#[derive(Clone, Debug)]
pub struct PreparedUpdate {
    statement: Statement,
    refetch: String,
    columns: usize,
}

impl PreparedUpdate {
    /// Updates the row `key` with `values` if `token` is not below its
    /// fence. `Ok(1)` when written, `Ok(0)` when no such row exists,
    /// [`Error::Stale`] when a newer token already wrote it.
    pub async fn execute(
        &self,
        client: &impl GenericClient,
        key: &(dyn ToSql + Sync),
        values: &[&(dyn ToSql + Sync)],
        token: FencingToken,
    ) -> Result<u64> {
        if values.len() != self.columns {
            return Err(Error::Config(format!(
                "{} values given for {} columns",
                values.len(),
                self.columns
            )));
        }
        let fence = i64::try_from(token)?;
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(values.len() + 2);
        params.push(key);
        params.push(&fence);
        params.extend_from_slice(values);
        let updated = client
            .execute(&self.statement, &params)
            .await
            .map_err(crate::pg_error)?;
        if updated > 0 {
            return Ok(updated);
        }
        let current: i64 = match client
            .query_opt(&self.refetch, &[key])
            .await
            .map_err(crate::pg_error)?
        {
            Some(r) => r.get(0),
            None => return Ok(0),
        };
        Err(Error::Stale {
            presented: token,
            highest: FencingToken::try_from(current)?,
        })
    }
}
