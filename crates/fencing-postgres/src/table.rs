//! The fence table: one high-water mark per resource, advanced inside the
//! caller's transaction.

use fencing_core::{Error, FencingToken, ResourceName, Result};
use tokio_postgres::GenericClient;

use crate::ident::Ident;

/// A table `(resource TEXT PRIMARY KEY, mark BIGINT NOT NULL)` of marks.
///
/// [`admit`](Self::admit) is one statement: an upsert that raises the mark
/// only when the token is not lower. Run it in the same transaction as the
/// write it guards: the row lock it takes holds off every other writer of
/// the resource until commit, so the check and the write are one step, and
/// a rollback undoes both.
///
/// ```no_run
/// # async fn demo(client: &mut tokio_postgres::Client, token: fencing_core::FencingToken) -> fencing_core::Result<()> {
/// use fencing_core::ResourceName;
/// use fencing_postgres::FenceTable;
///
/// let fences = FenceTable::new("fencing_marks")?;
/// fences.create(&*client).await?;
/// let tx = client.transaction().await.map_err(fencing_postgres::pg_error)?;
/// fences.admit(&tx, &ResourceName::new("ledger")?, token).await?; // Err(Stale) if superseded
/// tx.execute("UPDATE ledger SET balance = balance + 10", &[]).await.map_err(fencing_postgres::pg_error)?;
/// tx.commit().await.map_err(fencing_postgres::pg_error)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct FenceTable {
    name: Ident,
    upsert: String,
    select: String,
}

impl FenceTable {
    /// Names the table (letters, digits, `_`).
    pub fn new(name: &str) -> Result<Self> {
        let name = Ident::new(name)?;
        let t = name.sql();
        Ok(FenceTable {
            upsert: format!(
                "INSERT INTO {t} (resource, mark) VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET mark = EXCLUDED.mark \
                 WHERE {t}.mark <= EXCLUDED.mark RETURNING mark"
            ),
            select: format!("SELECT mark FROM {t} WHERE resource = $1"),
            name,
        })
    }

    /// Creates the table if it does not exist.
    pub async fn create(&self, client: &impl GenericClient) -> Result<()> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (resource TEXT PRIMARY KEY, mark BIGINT NOT NULL CHECK (mark >= 0))",
            self.name.sql()
        );
        client.batch_execute(&sql).await.map_err(crate::pg_error)
    }

    /// Raises the resource's mark to `token`, or fails with
    /// [`Error::Stale`] naming both tokens when the mark is higher. Equal
    /// tokens pass (a retried write). One round trip when admitted.
    pub async fn admit(
        &self,
        client: &impl GenericClient,
        resource: &ResourceName,
        token: FencingToken,
    ) -> Result<()> {
        let mark = i64::try_from(token)?;
        let rows = client
            .query(&self.upsert, &[&resource.as_str(), &mark])
            .await
            .map_err(crate::pg_error)?;
        if !rows.is_empty() {
            return Ok(());
        }
        // Refused: read the mark that refused it (same transaction, so it is
        // the row we just lost to).
        let highest = self
            .high_water(client, resource)
            .await?
            .unwrap_or(FencingToken::ZERO);
        Err(Error::Stale {
            presented: token,
            highest,
        })
    }

    /// The current mark of a resource.
    pub async fn high_water(
        &self,
        client: &impl GenericClient,
        resource: &ResourceName,
    ) -> Result<Option<FencingToken>> {
        let row = client
            .query_opt(&self.select, &[&resource.as_str()])
            .await
            .map_err(crate::pg_error)?;
        row.map(|r| FencingToken::try_from(r.get::<_, i64>(0)))
            .transpose()
    }
}
