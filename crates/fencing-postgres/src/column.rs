//! A fence column on the application's own table: the guarded write and
//! the check are one UPDATE.

use fencing_core::{Error, FencingToken, Result};
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Statement};

use crate::ident::Ident;

/// An `UPDATE` of one row of the application's table that only applies
/// when the row's fence column is not above the token, and sets it to the
/// token, in one statement that also reports why a refused update was
/// refused:
///
/// ```sql
/// WITH cur AS (SELECT fence FROM t WHERE key = $1 FOR NO KEY UPDATE),
///      upd AS (UPDATE t SET c1 = $3, ..., fence = $2 FROM cur
///              WHERE t.key = $1 AND (cur.fence IS NULL OR cur.fence <= $2) RETURNING 1)
/// SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM cur), (SELECT fence FROM cur LIMIT 1)
/// ```
///
/// The row is locked first and the decision and the report are taken from
/// that one locked version, so a refusal always names the fence that
/// refused it, also when a concurrent writer changed the row or deletes it
/// right afterwards. Every write is one statement, one round trip.
///
/// A `NULL` fence admits any token (and the write sets it): it is a row no
/// fenced write has touched yet, such as the rows that existed when the
/// fence column was added. Declare the column `BIGINT NOT NULL DEFAULT 0`
/// where that cannot happen. The key column must be unique (a primary key).
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
///
/// A fence column stores tokens of one source only: keep a separate column
/// (or a [`FenceTable`](crate::FenceTable) mark, which records its source)
/// per source.
#[derive(Clone, Debug)]
pub struct FencedUpdate {
    sql: String,
    columns: usize,
}

impl FencedUpdate {
    /// Builds the statement for `table`, keyed by `key_column` (unique),
    /// fenced by `fence_column` (a `BIGINT`), setting `columns` in that
    /// order.
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
        // `cur` locks the row (the lock the UPDATE takes anyway) and reads
        // its newest version; `upd` writes only if that version admits the
        // token; the SELECT reports from the same version. `FOR NO KEY
        // UPDATE` is the UPDATE's own lock level, so foreign-key checks on
        // the row are not held up.
        let sql = format!(
            "WITH cur AS (SELECT {f} AS fence FROM {t} WHERE {k} = $1 FOR NO KEY UPDATE), \
             upd AS (UPDATE {t} SET {} FROM cur WHERE {t}.{k} = $1 \
                     AND (cur.fence IS NULL OR cur.fence <= $2) RETURNING 1) \
             SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM cur), \
                    (SELECT fence FROM cur LIMIT 1)",
            sets.join(", ")
        );
        Ok(FencedUpdate {
            sql,
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
            columns: self.columns,
        })
    }
}

/// A [`FencedUpdate`] prepared on one connection.
#[derive(Clone, Debug)]
pub struct PreparedUpdate {
    statement: Statement,
    columns: usize,
}

impl PreparedUpdate {
    /// Updates the row `key` with `values` if `token` is not below its
    /// fence (or the fence is `NULL`). `Ok(1)` when written, `Ok(0)` when
    /// no such row exists, [`Error::Stale`] naming the row's fence when a
    /// newer token already wrote it.
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
        let row = client
            .query_one(&self.statement, &params)
            .await
            .map_err(crate::pg_error)?;
        let (updated, found, current) = (
            row.try_get::<_, i64>(0).map_err(crate::pg_error)?,
            row.try_get::<_, i64>(1).map_err(crate::pg_error)?,
            row.try_get::<_, Option<i64>>(2).map_err(crate::pg_error)?,
        );
        report(token, updated, found, current)
    }
}

/// Turns the statement's answer into the caller's: rows written, no such
/// row, or the fence that refused the token.
fn report(token: FencingToken, updated: i64, found: i64, current: Option<i64>) -> Result<u64> {
    if updated > 0 {
        return Ok(u64::try_from(updated).unwrap_or(0));
    }
    if found == 0 {
        return Ok(0);
    }
    match current {
        Some(fence) if fence > i64::try_from(token)? => {
            let stale = Error::Stale {
                presented: token,
                highest: FencingToken::try_from(fence)?,
            };
            fencing_core::metrics::gate_refused(&stale);
            Err(stale)
        }
        // The locked row admitted the token, yet nothing was written: the
        // key is not unique, or something other than the fence held the
        // UPDATE back. Never a silent success.
        other => Err(Error::backend(
            "fenced UPDATE",
            format!("row found with fence {other:?}, which admits token {token}, but not updated (is the key column unique?)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_never_mistakes_a_refusal_for_a_missing_row() {
        let t = FencingToken::new(5);
        assert_eq!(report(t, 1, 1, Some(3)).unwrap(), 1);
        assert_eq!(report(t, 0, 0, None).unwrap(), 0);
        match report(t, 0, 1, Some(9)) {
            Err(Error::Stale { presented, highest }) => {
                assert_eq!((presented.get(), highest.get()), (5, 9));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(report(t, 0, 1, None), Err(Error::Backend { .. })));
        assert!(matches!(
            report(t, 0, 1, Some(4)),
            Err(Error::Backend { .. })
        ));
    }

    #[test]
    fn the_statement_names_only_checked_identifiers() {
        let u = FencedUpdate::new("accounts", "id", "fence", &["balance", "note"]).unwrap();
        assert!(
            u.sql()
                .contains(r#""balance" = $3, "note" = $4, "fence" = $2"#),
            "{}",
            u.sql()
        );
        assert!(u.sql().contains("FOR NO KEY UPDATE"));
    }
}
