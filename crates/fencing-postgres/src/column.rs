//! A fence column on the application's own table: the guarded write and
//! the check are one UPDATE.

use fencing_core::{Error, FencingToken, Result};
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Statement};

use crate::ident::Ident;

/// An `UPDATE` of one row of the application's table that only applies
/// when the row's fence column is not above the token, and sets it to the
/// token:
///
/// ```sql
/// UPDATE t SET c1 = $3, ..., fence = $2
/// WHERE key = $1 AND (fence IS NULL OR fence <= $2)
/// ```
///
/// A write that lands is that statement alone, one round trip, as cheap
/// as the application's own UPDATE. Only when it writes nothing does a
/// second statement run, which tries the same write again and, in the
/// same snapshot, reports why it wrote nothing:
///
/// ```sql
/// WITH upd AS (UPDATE ... the same ... RETURNING 1)
/// SELECT n, CASE WHEN n = 0 THEN (SELECT count(*) FROM t WHERE key = $1) END,
///           CASE WHEN n = 0 THEN (SELECT max(fence) FROM t WHERE key = $1) END
/// FROM (SELECT count(*) AS n FROM upd) AS written
/// ```
///
/// The answer is that of the statement that decided: the first one when
/// it wrote, else the second (the first changed nothing, so trying again
/// is safe, and a row inserted in between with a fence that admits the
/// token is written). The UPDATE decides on the row's newest version (it
/// waits for a concurrent writer and checks again), the report reads the
/// statement's snapshot; when a concurrent writer raised the fence after
/// that snapshot, a third query reads the newest fence to name it (fences
/// only rise, so it is at least the one that refused). A row deleted after
/// a refusal and before the second statement is reported as missing
/// (`Ok(0)`), which it is by then; deleting a row drops its fence, so keep
/// the fences of rows that come and go in a [`FenceTable`](crate::FenceTable).
///
/// A `NULL` fence admits any token (and the write sets it): it is a row no
/// fenced write has touched yet, such as the rows that existed when the
/// fence column was added. Declare the column `BIGINT NOT NULL DEFAULT 0`
/// where that cannot happen. The key column must be unique (a primary key).
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client, token: fencing::FencingToken) -> fencing::Result<()> {
/// use fencing::postgres::FencedUpdate;
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
    /// The conditional UPDATE alone.
    sql: String,
    /// The same UPDATE, reporting why it wrote nothing.
    report_sql: String,
    /// Reads the newest fence of a row (parameter: key).
    fence_sql: String,
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
        let sql = format!(
            "UPDATE {t} SET {} WHERE {k} = $1 AND ({f} IS NULL OR {f} <= $2)",
            sets.join(", ")
        );
        // The report's subqueries are init plans, which PostgreSQL runs
        // only when first needed, but sets up on every execution: that
        // set-up alone made a write that landed 15-30 % slower.
        let report_sql = format!(
            "WITH upd AS ({sql} RETURNING 1) \
             SELECT n, \
             CASE WHEN n = 0 THEN (SELECT count(*) FROM {t} WHERE {k} = $1) END, \
             CASE WHEN n = 0 THEN (SELECT max({f}) FROM {t} WHERE {k} = $1) END \
             FROM (SELECT count(*) AS n FROM upd) AS written"
        );
        Ok(FencedUpdate {
            sql,
            report_sql,
            fence_sql: format!("SELECT {f} FROM {t} WHERE {k} = $1"),
            columns: columns.len(),
        })
    }

    /// The conditional UPDATE (parameters: key, token, then the columns).
    #[must_use]
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The statement run when the UPDATE wrote nothing: the same write,
    /// reporting in one snapshot whether the row exists and its fence.
    #[must_use]
    pub fn report_sql(&self) -> &str {
        &self.report_sql
    }

    /// Prepares both statements on a connection, once; a write that lands
    /// is then one round trip.
    pub async fn prepare(&self, client: &impl GenericClient) -> Result<PreparedUpdate> {
        Ok(PreparedUpdate {
            statement: client.prepare(&self.sql).await.map_err(crate::pg_error)?,
            report: client
                .prepare(&self.report_sql)
                .await
                .map_err(crate::pg_error)?,
            fence_sql: self.fence_sql.clone(),
            columns: self.columns,
        })
    }
}

/// A [`FencedUpdate`] prepared on one connection.
#[derive(Clone, Debug)]
pub struct PreparedUpdate {
    statement: Statement,
    report: Statement,
    fence_sql: String,
    columns: usize,
}

impl PreparedUpdate {
    /// Updates the row `key` with `values` if `token` is not below its
    /// fence (or the fence is `NULL`). `Ok(1)` when written, `Ok(0)` when
    /// no such row exists, [`Error::Stale`] naming the row's fence when a
    /// newer token already wrote it: the answer of the statement that
    /// decided (see [`FencedUpdate`]).
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
        let written = client
            .execute(&self.statement, &params)
            .await
            .map_err(crate::pg_error)?;
        if written > 0 {
            return Ok(written);
        }
        let row = client
            .query_one(&self.report, &params)
            .await
            .map_err(crate::pg_error)?;
        let (updated, found, current) = (
            row.try_get::<_, i64>(0).map_err(crate::pg_error)?,
            row.try_get::<_, Option<i64>>(1)
                .map_err(crate::pg_error)?
                .unwrap_or(0),
            row.try_get::<_, Option<i64>>(2).map_err(crate::pg_error)?,
        );
        if updated == 0 && found > 0 && current.is_none_or(|c| c <= fence) {
            // The snapshot admitted the token, the newest version did not:
            // a concurrent writer raised the fence. Name its fence.
            return self.refused_by_a_concurrent_write(client, key, token).await;
        }
        report(token, updated, found, current)
    }

    async fn refused_by_a_concurrent_write(
        &self,
        client: &impl GenericClient,
        key: &(dyn ToSql + Sync),
        token: FencingToken,
    ) -> Result<u64> {
        let row = client
            .query_opt(self.fence_sql.as_str(), &[key])
            .await
            .map_err(crate::pg_error)?;
        match row {
            Some(row) => {
                let current = row.try_get::<_, Option<i64>>(0).map_err(crate::pg_error)?;
                report(token, 0, 1, current)
            }
            // Refused, and gone before its fence could be read: still a
            // refusal, never "no such row".
            None => Err(Error::backend(
                "fenced UPDATE",
                format!("token {token} refused by a concurrent write to the row, which was deleted before its fence could be read"),
            )),
        }
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
            fencing_core::__private::gate_refused(&stale);
            Err(stale)
        }
        // The newest row admitted the token, yet nothing was written: the
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
        assert!(
            u.sql()
                .contains(r#"WHERE "id" = $1 AND ("fence" IS NULL OR "fence" <= $2)"#),
            "{}",
            u.sql()
        );
    }
}
