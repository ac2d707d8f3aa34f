//! PgGate: a Gate whose marks live in a PostgreSQL table.

use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::{FencingToken, Gate, ResourceName, Result, SourceId};

use crate::table::FenceTable;

/// A [`Gate`] kept in a [`FenceTable`], each admit its own transaction
/// (one statement). Marks are bound to sources as [`Gate`] describes;
/// [`PgGate::new`] adds the `source` column to a table made by an older
/// version.
/// Durable and shared by every process that uses the table. When the guarded
/// data is in the same database, prefer [`FenceTable::admit_grant`] inside the
/// write's transaction.
#[derive(Clone)]
pub struct PgGate {
    client: Arc<tokio_postgres::Client>,
    table: FenceTable,
}

impl PgGate {
    /// A gate on `table` (created if missing) over `client`.
    pub async fn new(client: Arc<tokio_postgres::Client>, table: &str) -> Result<Self> {
        let table = FenceTable::new(table)?;
        table.create(&*client).await?;
        Ok(PgGate { client, table })
    }
}

#[async_trait]
impl Gate for PgGate {
    async fn admit_with(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        self.table
            .admit_with(&*self.client, resource, source, token)
            .await
    }

    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        self.table.high_water(&*self.client, resource).await
    }
}
