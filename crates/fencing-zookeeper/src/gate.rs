//! ZkGate: high-water marks kept in znodes, advanced with a versioned
//! setData.

use async_trait::async_trait;
use fencing_core::backend::{check_fixed_source, check_token};
use fencing_core::{Error, FencingToken, Gate, ResourceName, Result, SourceId};
use zookeeper_client::{Acls, CreateMode, MultiWriteError};

use crate::config::check_path;
use crate::lock::check_resource;
use crate::session::{after_sync, Zk};
use crate::ZkSource;

/// How often a raise is retried when other writers move the mark meanwhile.
const MAX_RACES: usize = 32;

/// A [`Gate`] whose marks live at `PATH/RESOURCE` (decimal text), shared by
/// every storage node of the ensemble and kept across restarts. A raise is
/// a `setData` with the version that was read (or a create when absent), so
/// concurrent raises never lower a mark.
///
/// Get one from [`ZkSource::gate`](crate::ZkSource::gate). Its marks are
/// bound to that ensemble's source id: use the bound form,
/// [`admit_grant`](Gate::admit_grant) (with `grant.info()`) or
/// [`admit_from`](Gate::admit_from), which refuse a token of any other
/// source with [`Error::ForeignSource`]. The unbound
/// [`admit_any_source`](Gate::admit_any_source) takes the
/// token to be this ensemble's.
///
/// Each call runs on the source's current default session, so a gate
/// outlives the end of any one session (expired, or closed because its
/// lease was lost).
#[derive(Clone)]
pub struct ZkGate {
    sessions: ZkSource,
    source: SourceId,
    path: String,
    acls: Acls<'static>,
}

impl ZkGate {
    pub(crate) fn new(sessions: ZkSource, path: String, acls: Acls<'static>) -> Result<Self> {
        check_path(&path)?;
        Ok(ZkGate {
            source: fencing_core::FencingSource::identity(&sessions).clone(),
            sessions,
            path,
            acls,
        })
    }

    fn node(&self, resource: &ResourceName) -> Result<String> {
        check_resource(resource)?;
        Ok(format!("{}/{}", self.path, resource))
    }

    /// The mark and the node's data version; `None` when absent.
    async fn read(&self, zk: &Zk, node: &str) -> Result<Option<(FencingToken, i32)>> {
        let found = zk
            .read("gate read", |c| {
                let node = node.to_owned();
                async move {
                    // After a sync: not a lagging server's old mark.
                    let read = async {
                        match c.get_data(&node).await {
                            Err(zookeeper_client::Error::NoNode) => Ok(None),
                            other => other.map(Some),
                        }
                    };
                    after_sync(&c, read).await
                }
            })
            .await?;
        let Some((bytes, stat)) = found else {
            return Ok(None);
        };
        let mark = std::str::from_utf8(&bytes)
            .unwrap_or("")
            .parse::<FencingToken>()
            .map_err(|e| {
                Error::backend(format!("ZooKeeper gate node {node:?} holds no token"), e)
            })?;
        Ok(Some((mark, stat.version)))
    }

    /// Whether the mark still has `version`, confirmed by a check in a
    /// multi: a write-path operation the leader orders after every raise.
    async fn unchanged(zk: &Zk, node: &str, version: i32) -> Result<bool> {
        let mut writer = zk.client.new_multi_writer();
        writer
            .add_check_version(node, version)
            .map_err(|e| zk.error("gate check", e))?;
        match zk
            .write("gate check", async { Ok(writer.commit().await) })
            .await?
        {
            Ok(_) => Ok(true),
            Err(MultiWriteError::OperationFailed { .. }) => Ok(false),
            Err(e) => Err(zk.error("gate check", e.into())),
        }
    }

    /// One raise attempt: false when someone else changed the node first.
    async fn try_raise(
        &self,
        zk: &Zk,
        node: &str,
        token: FencingToken,
        version: Option<i32>,
    ) -> Result<bool> {
        let data = token.to_string();
        let client = &zk.client;
        let outcome = match version {
            Some(v) => client
                .set_data(node, data.as_bytes(), Some(v))
                .await
                .map(drop),
            None => match client
                .create(
                    node,
                    data.as_bytes(),
                    &CreateMode::Persistent.with_acls(self.acls),
                )
                .await
            {
                Err(zookeeper_client::Error::NoNode) => {
                    let parents = CreateMode::Persistent.with_acls(self.acls);
                    zk.write("create gate path", client.mkdir(&self.path, &parents))
                        .await?;
                    return Ok(false);
                }
                other => other.map(drop),
            },
        };
        match outcome {
            Ok(()) => Ok(true),
            Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NodeExists) => {
                Ok(false)
            }
            Err(e) => Err(zk.error("gate write", e)),
        }
    }
}

#[async_trait]
impl Gate for ZkGate {
    /// The marks live in the ensemble that mints the tokens, so they are
    /// bound to it: a token named as another source's is refused with
    /// [`Error::ForeignSource`] before anything is read or written; the
    /// unbound form takes the token to be this ensemble's.
    async fn admit_with(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()> {
        check_fixed_source(resource, &self.source, source)?;
        let node = self.node(resource)?;
        self.sessions
            .on_default_session(|zk| self.admit_on(zk, &node, token))
            .await
    }

    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let node = self.node(resource)?;
        let mark = self
            .sessions
            .on_default_session(|zk| {
                let node = node.clone();
                async move { self.read(&zk, &node).await }
            })
            .await?;
        Ok(mark.map(|(mark, _)| mark))
    }
}

impl ZkGate {
    /// One admit on `zk`'s session: the token rule against the mark, and a
    /// raise when it is higher.
    async fn admit_on(&self, zk: Zk, node: &str, token: FencingToken) -> Result<()> {
        let zk = &zk;
        for _ in 0..MAX_RACES {
            let current = self.read(zk, node).await?;
            if let Some((mark, version)) = current {
                if mark == token {
                    // Equal to the mark as read. A read is answered by one
                    // server, which may lag (or, cut off from its leader,
                    // still answer): admit only if a check of the mark's
                    // version, which the leader orders after every raise,
                    // still holds.
                    if Self::unchanged(zk, node, version).await? {
                        return Ok(());
                    }
                    continue;
                }
            }
            // Lower than the mark: Stale. Higher: raise it.
            check_token(current.map(|(mark, _)| mark), token)?;
            if self
                .try_raise(zk, node, token, current.map(|(_, v)| v))
                .await?
            {
                return Ok(());
            }
        }
        Err(Error::backend(
            "ZooKeeper gate",
            format!("mark of {node:?} kept moving for {MAX_RACES} tries"),
        ))
    }
}
