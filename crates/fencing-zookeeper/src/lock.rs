//! The lock protocol of Curator's `InterProcessMutex`, so Java and Rust
//! processes can share a lock:
//!
//! - my node is `LOCK/_c_<uuid>-lock-<10-digit sequence>`, ephemeral and
//!   sequential; missing parents are created as container nodes;
//! - nodes sort by what follows the last `lock-`; the lowest holds the lock;
//! - a waiter watches only its predecessor (no herd);
//! - if the connection drops while creating, the `_c_<uuid>` prefix finds
//!   the node we may have created ("protection mode"), so none is orphaned.
//!
//! The fencing token is my node's czxid: the zxid of the transaction that
//! created it, `epoch << 32 | counter`, which only grows, also across leader
//! elections. Not the sequence suffix: that restarts when the parent is
//! deleted and recreated.

use std::sync::atomic::{AtomicU64, Ordering};

use fencing_core::backend::LeaseTracker;
use fencing_core::{Error, FencingToken, LossReason, ResourceName, Result};
use tokio::time::Instant;
use zookeeper_client::{Acls, CreateMode};

use crate::config::{check_segment, ENSEMBLE_ID_NODE};
use crate::session::{after_sync, Zk};

const LOCK_NAME: &str = "lock-";

/// A resource is one znode name under the lock path.
pub(crate) fn check_resource(resource: &ResourceName) -> Result<()> {
    check_segment(resource.as_str()).map_err(|why| {
        Error::invalid_resource(
            resource.as_str(),
            format!("not a usable znode name: it {why}"),
        )
    })
}

pub(crate) fn lock_dir(path: &str, resource: &ResourceName) -> String {
    format!("{path}/{resource}")
}

/// Curator's sort key: the text after the last `lock-`.
fn sort_key(name: &str) -> &str {
    name.rfind(LOCK_NAME)
        .map_or(name, |i| &name[i + LOCK_NAME.len()..])
}

/// The children of a lock in lock order (none when the lock node is gone).
async fn contenders(zk: &Zk, dir: &str) -> Result<Vec<String>> {
    let children = zk
        .read("list lock", |c| {
            let dir = dir.to_owned();
            async move { list_lock(&c, &dir).await }
        })
        .await?;
    Ok(in_lock_order(children))
}

/// The same as of a `sync` sent ahead of the list ([`after_sync`]): a
/// server that is behind does not hide a node another client made through
/// another server, so a holder granted before the call is seen (once
/// missed under load).
async fn contenders_after_sync(zk: &Zk, dir: &str) -> Result<Vec<String>> {
    let children = zk
        .read("sync and list lock", |c| {
            let dir = dir.to_owned();
            async move { after_sync(&c, list_lock(&c, &dir)).await }
        })
        .await?;
    Ok(in_lock_order(children))
}

async fn list_lock(
    c: &zookeeper_client::Client,
    dir: &str,
) -> std::result::Result<Vec<String>, zookeeper_client::Error> {
    match c.list_children(dir).await {
        Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
        other => other,
    }
}

fn in_lock_order(mut children: Vec<String>) -> Vec<String> {
    children.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
    children
}

/// My node once created.
pub(crate) struct MyNode {
    pub(crate) path: String,
    pub(crate) token: FencingToken,
}

/// The name prefix (`_c_<uuid>-`) of the one node an acquire may create:
/// it finds that node again when the create's answer never came.
pub(crate) fn protection() -> String {
    format!("_c_{}-", uuid::Uuid::new_v4())
}

/// Creates my node, with protection mode on a lost connection.
pub(crate) async fn create_node(
    zk: &Zk,
    dir: &str,
    protect: &str,
    holder: &str,
    acls: Acls<'static>,
) -> Result<MyNode> {
    let prefix = format!("{dir}/{protect}{LOCK_NAME}");
    let options = CreateMode::EphemeralSequential.with_acls(acls);
    for _ in 0..MAX_CREATE_TRIES {
        match zk.client.create(&prefix, holder.as_bytes(), &options).await {
            Ok((stat, seq)) => return node(format!("{prefix}{seq}"), stat.czxid),
            Err(zookeeper_client::Error::NoNode) => {
                let parents = CreateMode::Container.with_acls(acls);
                zk.write("create lock parents", zk.client.mkdir(dir, &parents))
                    .await?;
            }
            Err(zookeeper_client::Error::ConnectionLoss) => {
                if let Some(found) = find_protected(zk, dir, protect).await? {
                    return Ok(found);
                }
            }
            Err(e) => return Err(zk.error("create lock node", e)),
        }
    }
    Err(Error::backend(
        "ZooKeeper create lock node",
        "gave up after repeated connection loss",
    ))
}

const MAX_CREATE_TRIES: usize = 10;

fn node(path: String, czxid: i64) -> Result<MyNode> {
    Ok(MyNode {
        path,
        token: FencingToken::try_from(czxid)?,
    })
}

/// After a lost connection: did our create go through?
async fn find_protected(zk: &Zk, dir: &str, protect: &str) -> Result<Option<MyNode>> {
    let Some(name) = protected_nodes(zk, dir, protect).await?.into_iter().next() else {
        return Ok(None);
    };
    let path = format!("{dir}/{name}");
    match stat(zk, &path).await? {
        Some(czxid) => node(path, czxid).map(Some),
        None => Ok(None),
    }
}

/// The children of `dir` made by the acquire that used `protect`, listed
/// after a `sync`: after a lost connection, a server that is behind could
/// miss the node our create made through another one, and we would create
/// a second node behind our own first.
async fn protected_nodes(zk: &Zk, dir: &str, protect: &str) -> Result<Vec<String>> {
    let children = zk
        .read("list lock after sync", |c| {
            let dir = dir.to_owned();
            async move {
                match after_sync(&c, c.list_children(&dir)).await {
                    Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
                    other => other,
                }
            }
        })
        .await?;
    Ok(children
        .into_iter()
        .filter(|c| c.starts_with(protect))
        .collect())
}

/// Deletes whatever node the acquire that used `protect` made, found by
/// its name: for an acquire abandoned while its create was in flight.
pub(crate) async fn delete_protected(zk: &Zk, dir: &str, protect: &str) -> Result<usize> {
    let found = protected_nodes(zk, dir, protect).await?;
    for name in &found {
        delete(zk, &format!("{dir}/{name}")).await?;
    }
    Ok(found.len())
}

/// A node's czxid, if it exists.
pub(crate) async fn stat(zk: &Zk, path: &str) -> Result<Option<i64>> {
    let stat = zk
        .read("stat", |c| {
            let path = path.to_owned();
            async move { c.check_stat(&path).await }
        })
        .await?;
    Ok(stat.map(|s| s.czxid))
}

/// Waits until my node is the lowest, watching only my predecessor.
pub(crate) async fn wait_until_first(
    zk: &Zk,
    resource: &ResourceName,
    dir: &str,
    mine: &MyNode,
    wakeups: &AtomicU64,
) -> Result<()> {
    let my_name = mine.path.rsplit('/').next().unwrap_or_default();
    loop {
        let children = contenders(zk, dir).await?;
        let Some(index) = children.iter().position(|c| c == my_name) else {
            return Err(Error::lost(
                resource,
                "lock node vanished while waiting (session expired or node deleted)",
            ));
        };
        if index == 0 {
            return Ok(());
        }
        let pred = format!("{dir}/{}", children[index - 1]);
        let (exists, watcher) = zk
            .read("watch predecessor", |c| {
                let pred = pred.clone();
                async move { c.check_and_watch_stat(&pred).await }
            })
            .await?;
        if exists.is_some() {
            watcher.changed().await;
            wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// True when my node is the lowest now.
pub(crate) async fn is_first(zk: &Zk, dir: &str, mine: &MyNode) -> Result<bool> {
    let my_name = mine.path.rsplit('/').next().unwrap_or_default();
    Ok(contenders(zk, dir)
        .await?
        .first()
        .is_some_and(|c| c == my_name))
}

/// Watches my node and reports its deletion (by anyone) as loss. It ends
/// when the grant is marked lost, or released and the node deleted; it
/// does not watch the deadline (the session's heartbeat does, once for
/// every grant), so N held grants cost no timer wake-ups per renewal.
pub(crate) async fn watch_own_node(zk: Zk, path: String, token: FencingToken, lease: LeaseTracker) {
    loop {
        // Released (or lost) before the watch was set: nothing to watch.
        if lease.loss_reason().is_some() {
            return;
        }
        // After a reconnect the stat could reach a server that has not yet
        // seen our node's deletion: a sync on the same connection first.
        let watched = zk
            .read("watch own node", |c| {
                let path = path.clone();
                async move { after_sync(&c, c.check_and_watch_stat(&path)).await }
            })
            .await;
        match watched {
            Ok((Some(stat), watcher)) if stat.czxid as u64 == token.get() => {
                let mut changed = std::pin::pin!(watcher.changed());
                tokio::select! {
                    _ = lease.marked_lost() => {}
                    _ = &mut changed => continue,
                }
                if lease.loss_reason() == Some(LossReason::Released) {
                    // The release deletes the node next, which fires the
                    // watch; dropping it unfired would cost a removeWatches
                    // request (two, with the event that follows anyway).
                    // The release aborts this task once its delete is done.
                    changed.await;
                }
                return;
            }
            Ok(_) => {
                lease.mark_lost(
                    LossReason::DeletedAtServer,
                    "lock node deleted in ZooKeeper",
                );
                return;
            }
            // Disconnected: the session heartbeat decides; look again soon.
            Err(_) => {
                tokio::select! {
                    _ = lease.marked_lost() => return,
                    _ = tokio::time::sleep_until(Instant::now() + std::time::Duration::from_millis(200)) => {}
                }
            }
        }
    }
}

/// The current holder: the lowest node's data (or name) and czxid.
pub(crate) async fn owner(zk: &Zk, dir: &str) -> Result<Option<(String, FencingToken)>> {
    for name in contenders_after_sync(zk, dir).await? {
        let path = format!("{dir}/{name}");
        let data = zk
            .read("get holder", |c| {
                let path = path.clone();
                async move {
                    match c.get_data(&path).await {
                        Ok(d) => Ok(Some(d)),
                        Err(zookeeper_client::Error::NoNode) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
            })
            .await?;
        // A node deleted between the list and the read: the next one holds.
        if let Some((bytes, stat)) = data {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let holder = if text.is_empty() { name } else { text };
            return Ok(Some((holder, FencingToken::try_from(stat.czxid)?)));
        }
    }
    Ok(None)
}

/// The ensemble's id in [`ENSEMBLE_ID_NODE`]: made by the first source that
/// connects (a random id, readable by anyone and writable by no one), read
/// by every later one. Read after a `sync`, so a server that is behind
/// does not miss a node made through another.
pub(crate) async fn ensemble_id(zk: &Zk) -> Result<String> {
    let fresh = uuid::Uuid::new_v4().simple().to_string();
    let options = CreateMode::Persistent.with_acls(Acls::anyone_read());
    let created = zk
        .client
        .create(ENSEMBLE_ID_NODE, fresh.as_bytes(), &options);
    match tokio::time::timeout(zk.request_timeout(), created).await {
        Ok(Ok(_)) => return Ok(fresh),
        Ok(Err(zookeeper_client::Error::NodeExists)) => {}
        Ok(Err(zookeeper_client::Error::NoAuth)) => {
            return Err(Error::PermissionDenied(format!(
                "ZooKeeper: may not create {ENSEMBLE_ID_NODE}, which names the ensemble for the \
                 source identity; allow creating it under /, or name the ensemble (ensemble=)"
            )))
        }
        // A lost answer: the node may exist now; the read tells.
        Ok(Err(_)) | Err(_) => {}
    }
    let (data, _) = zk
        .read("read the ensemble id", |c| async move {
            after_sync(&c, c.get_data(ENSEMBLE_ID_NODE)).await
        })
        .await?;
    match String::from_utf8(data) {
        Ok(id) if !id.is_empty() && id.chars().all(|c| c.is_ascii_graphic()) => Ok(id),
        _ => Err(Error::backend(
            format!("ZooKeeper ensemble id in {ENSEMBLE_ID_NODE}"),
            "not a printable id; delete the node, or name the ensemble (ensemble=)",
        )),
    }
}

/// Deletes my node; already gone is fine.
pub(crate) async fn delete(zk: &Zk, path: &str) -> Result<()> {
    let deleting = async {
        match zk.client.delete(path, None).await {
            // Gone already; with an expired session the server deleted the
            // ephemeral node itself, so there is nothing left to release.
            Err(zookeeper_client::Error::NoNode | zookeeper_client::Error::SessionExpired) => {
                Ok(())
            }
            other => other,
        }
    };
    zk.write("delete lock node", deleting).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_curator() {
        let mut names = [
            "_c_b-lock-0000000010".to_owned(),
            "_c_a-lock-0000000002".to_owned(),
            "_c_c-lock-0000000001".to_owned(),
        ];
        names.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
        assert_eq!(names[0], "_c_c-lock-0000000001");
        assert_eq!(names[2], "_c_b-lock-0000000010");
    }

    #[test]
    fn resource_names_must_be_one_znode() {
        for bad in ["a/b", ".", ".."] {
            assert!(
                check_resource(&ResourceName::nonportable(bad).unwrap()).is_err(),
                "{bad}"
            );
        }
        assert!(check_resource(&ResourceName::new("orders").unwrap()).is_ok());
    }
}
