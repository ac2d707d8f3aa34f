//! The fence table: one high-water mark per resource, advanced inside the
//! caller's transaction.

use fencing_core::backend::next_mark;
use fencing_core::{Error, FencingToken, GrantInfo, Mark, ResourceName, Result, SourceId};
use tokio_postgres::GenericClient;

use crate::ident::Ident;

/// A table `(resource TEXT PRIMARY KEY, mark BIGINT NOT NULL, source TEXT)`
/// of marks, each bound to the source of the token that set it (`source`
/// is `NULL` for a mark set by the unbound form, or made before marks had
/// sources).
///
/// [`admit_from`](Self::admit_from) and [`admit_any_source`](Self::admit_any_source) are one
/// statement each: an upsert that raises the mark only when the token is not
/// lower and its source matches the mark's (the rules of
/// [`Gate`](fencing_core::Gate)), and returns the row it left, which names
/// the reason of a refusal. Run it in the same transaction as the write it
/// guards: the row lock it takes holds off every other writer of the
/// resource until commit, so the check and the write are one step, and a
/// rollback undoes both.
///
/// ```no_run
/// # async fn demo(client: &mut tokio_postgres::Client, grant: &fencing::Grant) -> fencing::Result<()> {
/// use fencing::ResourceName;
/// use fencing::postgres::FenceTable;
///
/// let fences = FenceTable::new("fencing_marks")?;
/// fences.create(&*client).await?; // also adds the source column to an older table
/// let tx = client.transaction().await.map_err(fencing::postgres::pg_error)?;
/// // Err(Stale) if superseded, Err(ForeignSource) if another source set the mark
/// fences.admit_from(&tx, grant.resource(), grant.source(), grant.token()).await?;
/// tx.execute("UPDATE ledger SET balance = balance + 10", &[]).await.map_err(fencing::postgres::pg_error)?;
/// tx.commit().await.map_err(fencing::postgres::pg_error)?;
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
        // A refused admit still "updates" the row to itself, so that
        // RETURNING reports the locked row that refused it, in the same
        // statement. `m.source = EXCLUDED.source` is NULL (false) for an
        // unbound admit of a bound mark.
        let admits = "m.mark <= EXCLUDED.mark AND (m.source IS NULL OR m.source = EXCLUDED.source)";
        Ok(FenceTable {
            upsert: format!(
                "INSERT INTO {t} AS m (resource, mark, source) VALUES ($1, $2, $3) \
                 ON CONFLICT (resource) DO UPDATE SET \
                 mark = CASE WHEN {admits} THEN EXCLUDED.mark ELSE m.mark END, \
                 source = CASE WHEN {admits} THEN COALESCE(EXCLUDED.source, m.source) ELSE m.source END \
                 RETURNING mark, source"
            ),
            select: format!("SELECT mark, source FROM {t} WHERE resource = $1"),
            name,
        })
    }

    /// Creates the table if it does not exist, and adds the `source`
    /// column to a table made before marks had sources (its marks stay
    /// unbound). Call it after upgrading, before the first admit.
    pub async fn create(&self, client: &impl GenericClient) -> Result<()> {
        let t = self.name.sql();
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {t} (resource TEXT PRIMARY KEY, mark BIGINT NOT NULL CHECK (mark >= 0), source TEXT); \
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS source TEXT"
        );
        client.batch_execute(&sql).await.map_err(crate::pg_error)
    }

    /// The bound form: raises the resource's mark to `token` minted by
    /// `source`. Fails with [`Error::ForeignSource`] when another source
    /// set the mark, and with [`Error::Stale`] naming both tokens when the
    /// mark is higher. Equal tokens pass (a retried write). One round trip.
    pub async fn admit_from(
        &self,
        client: &impl GenericClient,
        resource: &ResourceName,
        source: &SourceId,
        token: FencingToken,
    ) -> Result<()> {
        self.admit_with(client, resource, Some(source), token).await
    }

    /// The bound form with the resource, source and token of a grant.
    pub async fn admit_grant(&self, client: &impl GenericClient, grant: &GrantInfo) -> Result<()> {
        self.admit_with(client, &grant.resource, Some(&grant.source), grant.token)
            .await
    }

    /// The unbound form, for a database whose writers all hold tokens of
    /// one source (it skips the source check): raises the mark or fails
    /// with [`Error::Stale`]; refused with [`Error::UnnamedSource`] once a
    /// bound admit bound the mark.
    pub async fn admit_any_source(
        &self,
        client: &impl GenericClient,
        resource: &ResourceName,
        token: FencingToken,
    ) -> Result<()> {
        self.admit_with(client, resource, None, token).await
    }

    /// Either form: bound with `source`, unbound without (as
    /// [`Gate::admit_with`](fencing_core::Gate::admit_with)).
    pub async fn admit_with(
        &self,
        client: &impl GenericClient,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        let mark = i64::try_from(token)?;
        let row = client
            .query_one(
                &self.upsert,
                &[&resource.as_str(), &mark, &source.map(SourceId::as_str)],
            )
            .await
            .map_err(crate::pg_error)?;
        let left = mark_of(&row)?;
        // The row the statement left admits this token as a retry exactly
        // when this admit passed; otherwise it is the mark that refused it,
        // and the rule names why.
        match next_mark(resource, Some(&left), source, token)? {
            None => Ok(()),
            Some(_) => Err(Error::backend(
                "fence table",
                format!("admit of {token} left the mark at {left:?}"),
            )),
        }
    }

    /// The current mark of a resource.
    pub async fn high_water(
        &self,
        client: &impl GenericClient,
        resource: &ResourceName,
    ) -> Result<Option<FencingToken>> {
        Ok(self.mark(client, resource).await?.map(|m| m.token))
    }

    /// The current mark of a resource and the source it is bound to.
    pub async fn mark(
        &self,
        client: &impl GenericClient,
        resource: &ResourceName,
    ) -> Result<Option<Mark>> {
        let row = client
            .query_opt(&self.select, &[&resource.as_str()])
            .await
            .map_err(crate::pg_error)?;
        row.as_ref().map(mark_of).transpose()
    }
}

fn mark_of(row: &tokio_postgres::Row) -> Result<Mark> {
    let token = row.try_get::<_, i64>(0).map_err(crate::pg_error)?;
    let source = row
        .try_get::<_, Option<String>>(1)
        .map_err(crate::pg_error)?;
    Ok(Mark {
        token: FencingToken::try_from(token)?,
        source: source.map(SourceId::new),
    })
}
