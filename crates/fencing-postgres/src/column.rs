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
/// WITH upd AS (UPDATE t SET c1 = $3, ..., fence = $2
///              WHERE key = $1 AND (fence IS NULL OR fence <= $2) RETURNING 1)
/// SELECT (SELECT count(*) FROM upd), count(*), max(fence) FROM t WHERE key = $1
/// ```
///
/// The decision is the UPDATE's own: it locks the row and checks the fence
/// on the newest version, also when a concurrent writer committed after the
/// statement began. The report is read from the statement's snapshot; a
/// fence above the token there refuses it (fences only rise), and a row
/// whose fence admitted the token but was not written (a concurrent writer
/// raised its fence or deleted it in between) is read once more, so a
/// refusal always names a fence above the token. Every write without such
/// a race is one statement, one round trip, and costs about what the bare
/// conditional UPDATE does.
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
    recheck: String,
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
            "WITH upd AS (UPDATE {t} SET {} WHERE {k} = $1 \
                     AND ({f} IS NULL OR {f} <= $2) RETURNING 1) \
             SELECT (SELECT count(*) FROM upd), count(*), max({f}) FROM {t} WHERE {k} = $1",
            sets.join(", ")
        );
        // Run only after a race: a fresh statement sees the newer row.
        let recheck = format!("SELECT 0::bigint, count(*), max({f}) FROM {t} WHERE {k} = $1");
        Ok(FencedUpdate {
            sql,
            recheck,
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
            recheck: client
                .prepare(&self.recheck)
                .await
                .map_err(crate::pg_error)?,
            columns: self.columns,
        })
    }
}

/// A [`FencedUpdate`] prepared on one connection.
#[derive(Clone, Debug)]
pub struct PreparedUpdate {
    statement: Statement,
    recheck: Statement,
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
        let answer = query(client, &self.statement, &params).await?;
        match report(token, answer)? {
            Verdict::Written(n) => Ok(n),
            Verdict::NoRow => Ok(0),
            Verdict::Raced => {
                let again = query(client, &self.recheck, &[key]).await?;
                match report(token, again)? {
                    Verdict::NoRow => Ok(0),
                    // Still admits the token, yet the UPDATE wrote nothing.
                    _ => Err(Error::backend(
                        "fenced UPDATE",
                        format!("row found with fence {:?}, which admits token {token}, but not updated (is the key column unique?)", again.2),
                    )),
                }
            }
        }
    }
}

/// What one statement answered: rows written, rows found, their fence.
type Answer = (i64, i64, Option<i64>);

async fn query(
    client: &impl GenericClient,
    statement: &Statement,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Answer> {
    let row = client
        .query_one(statement, params)
        .await
        .map_err(crate::pg_error)?;
    Ok((
        row.try_get(0).map_err(crate::pg_error)?,
        row.try_get(1).map_err(crate::pg_error)?,
        row.try_get(2).map_err(crate::pg_error)?,
    ))
}

/// The outcome of a fenced UPDATE that was not refused.
#[derive(Debug, PartialEq)]
enum Verdict {
    Written(u64),
    NoRow,
    /// The row's fence admitted the token, yet nothing was written.
    Raced,
}

/// Turns a statement's answer into the caller's: rows written, no such
/// row, a race to look at again, or the fence that refused the token.
fn report(token: FencingToken, (updated, found, current): Answer) -> Result<Verdict> {
    if updated > 0 {
        return Ok(Verdict::Written(u64::try_from(updated).unwrap_or(0)));
    }
    if found == 0 {
        return Ok(Verdict::NoRow);
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
        _ => Ok(Verdict::Raced),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_never_mistakes_a_refusal_for_a_missing_row() {
        let t = FencingToken::new(5);
        assert_eq!(report(t, (1, 1, Some(3))).unwrap(), Verdict::Written(1));
        assert_eq!(report(t, (0, 0, None)).unwrap(), Verdict::NoRow);
        match report(t, (0, 1, Some(9))) {
            Err(Error::Stale { presented, highest }) => {
                assert_eq!((presented.get(), highest.get()), (5, 9));
            }
            other => panic!("{other:?}"),
        }
        // Found with a fence that admits the token, not written: look again.
        assert_eq!(report(t, (0, 1, None)).unwrap(), Verdict::Raced);
        assert_eq!(report(t, (0, 1, Some(4))).unwrap(), Verdict::Raced);
        assert_eq!(report(t, (0, 1, Some(5))).unwrap(), Verdict::Raced);
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
        // The decision is in the UPDATE's own WHERE, which PostgreSQL
        // re-checks on the newest row version after waiting for its lock.
        assert!(
            u.sql()
                .contains(r#"WHERE "id" = $1 AND ("fence" IS NULL OR "fence" <= $2)"#),
            "{}",
            u.sql()
        );
    }
}
