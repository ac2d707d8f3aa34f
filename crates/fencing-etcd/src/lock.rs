//! The lock protocol, key for key the one of Go's `concurrency.Mutex`, so
//! Rust and Go processes can share a lock:
//!
//! - my key is `PREFIX/RESOURCE/` + the session's lease id in hex, attached
//!   to the lease;
//! - one txn creates it (or reads it back) and reads the oldest key under
//!   the lock prefix; the oldest key owns the lock;
//! - a waiter watches only the newest key older than its own until it is
//!   deleted (no thundering herd), then looks again;
//! - after waiting, my key must still exist with my revision: if the session
//!   expired meanwhile, the lock was never mine.
//!
//! The fencing token is my key's create revision: one raft-ordered counter
//! for the whole store, so it only grows, also across leader changes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use fencing_core::__private::jittered;
use fencing_core::{Error, ResourceName, Result};

use crate::conn::Conn;
use crate::watches::Watches;

/// Keys of one lock.
#[derive(Clone, Debug)]
pub(crate) struct LockKeys {
    /// `PREFIX/RESOURCE/`: every contender's key starts with it.
    pub(crate) dir: String,
    /// This session's key.
    pub(crate) mine: String,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, resource: &ResourceName, lease_id: i64) -> LockKeys {
        let dir = lock_dir(prefix, resource);
        let mine = format!("{dir}{lease_id:x}");
        LockKeys { dir, mine }
    }
}

pub(crate) fn lock_dir(prefix: &str, resource: &ResourceName) -> String {
    format!("{prefix}/{resource}/")
}

/// Resource names become one key segment, so they may not contain `/`
/// (lock `a` would otherwise see the keys of lock `a/b`).
pub(crate) fn check_resource(resource: &ResourceName) -> Result<()> {
    if resource.as_str().contains('/') {
        return Err(Error::invalid_resource(
            resource.as_str(),
            "etcd lock names may not contain '/'",
        ));
    }
    Ok(())
}

fn first_created() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
}

/// Outcome of the acquire txn.
pub(crate) struct Attempt {
    /// My key's create revision: the token if I get the lock.
    pub(crate) rev: i64,
    /// True when my key is the oldest.
    pub(crate) owner: bool,
    /// True when my key was already there (left over by an earlier grant
    /// of this session whose release failed).
    pub(crate) existed: bool,
}

/// Creates my key if absent and reads the owner, in one txn.
pub(crate) async fn attempt(
    conn: &Conn,
    keys: &LockKeys,
    lease_id: i64,
    holder: &str,
) -> Result<Attempt> {
    let txn = Txn::new()
        .when([Compare::create_revision(
            keys.mine.as_str(),
            CompareOp::Equal,
            0,
        )])
        .and_then([
            TxnOp::put(
                keys.mine.as_str(),
                holder,
                Some(PutOptions::new().with_lease(lease_id)),
            ),
            TxnOp::get(keys.dir.as_str(), Some(first_created())),
        ])
        .or_else([
            TxnOp::get(keys.mine.as_str(), None),
            TxnOp::get(keys.dir.as_str(), Some(first_created())),
        ]);
    let resp = conn
        .call("lock txn", |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await?;
    let ops: Vec<OpRead> = op_responses(&resp, "etcd lock txn")?
        .iter()
        .map(OpRead::of)
        .collect();
    let revision = resp.header().map(|h| h.revision());
    read_attempt(resp.succeeded(), revision, &ops)
}

/// The operations of a txn reply; a reply that lacks an operation's result
/// is an error naming `what` (etcd-client's `op_responses` would panic).
pub(crate) fn op_responses(resp: &TxnResponse, what: &str) -> Result<Vec<TxnOpResponse>> {
    if resp.0.responses.iter().any(|op| op.response.is_none()) {
        return Err(Error::backend(
            what,
            "txn answered an operation without its result",
        ));
    }
    Ok(resp.op_responses())
}

/// What the lock txns take from one operation of a txn reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpRead {
    /// A read: the create revision of its first key, if it found one.
    Get(Option<i64>),
    /// A write (or a nested txn) where the txn may have sent one.
    Other,
}

impl OpRead {
    fn of(op: &TxnOpResponse) -> OpRead {
        match op {
            TxnOpResponse::Get(g) => OpRead::Get(g.kvs().first().map(|kv| kv.create_revision())),
            _ => OpRead::Other,
        }
    }
}

/// The acquire txn's outcome from its reply: whether its compare held,
/// the header's revision, and its two operations (a put or a read of my
/// key, then the read of the oldest key). A reply of another shape (a
/// buggy server or proxy) is an error, never an index out of bounds, and
/// never a missing read taken for "no older key", which would grant a
/// lock someone else owns.
fn read_attempt(succeeded: bool, revision: Option<i64>, ops: &[OpRead]) -> Result<Attempt> {
    let malformed = |why: String| Error::backend("etcd lock txn", why);
    let [mine, oldest] = ops else {
        return Err(malformed(format!(
            "reply has {} operations where the txn sent 2",
            ops.len()
        )));
    };
    let rev = match (succeeded, mine) {
        (true, _) => revision.unwrap_or(0),
        (false, OpRead::Get(created)) => created.unwrap_or(0),
        (false, OpRead::Other) => {
            return Err(malformed(
                "reply answers the read of my key with a write".into(),
            ))
        }
    };
    if rev <= 0 {
        return Err(malformed("could not read back my own key".into()));
    }
    let OpRead::Get(oldest) = *oldest else {
        return Err(malformed(
            "reply answers the read of the oldest key with a write".into(),
        ));
    };
    Ok(Attempt {
        rev,
        owner: oldest.is_none_or(|oldest| oldest == rev),
        existed: !succeeded,
    })
}

fn first_kv_create(op: &TxnOpResponse) -> Option<i64> {
    match op {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.create_revision()),
        _ => None,
    }
}

/// Waits until no key older than mine (created at `rev`) is left under the
/// lock, watching one predecessor at a time; false as soon as my key is
/// gone or replaced (my session expired while I waited: the lock was never
/// mine). Each look is one read-only txn that reads the newest older key
/// and my own key at one revision, so the look that finds the lock free
/// also proves my key survived: a hand-over costs one read, not two (Go's
/// Mutex reads its key again after waiting). Counts the delete events it
/// is woken by.
pub(crate) async fn wait_for_predecessors(
    conn: &Conn,
    watches: &Arc<Watches>,
    keys: &LockKeys,
    rev: i64,
    wakeups: &AtomicU64,
) -> Result<bool> {
    let newest_older = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(1)
        .with_max_create_revision(rev - 1);
    let look = Txn::new().and_then([
        TxnOp::get(keys.dir.as_str(), Some(newest_older)),
        TxnOp::get(keys.mine.as_str(), None),
    ]);
    loop {
        let resp = conn
            .call("lock wait txn", |mut c| {
                let look = look.clone();
                async move { c.txn(look).await }
            })
            .await?;
        let ops = op_responses(&resp, "etcd lock wait")?;
        if ops.len() != 2 {
            return Err(Error::backend(
                "etcd lock wait",
                "txn answered without its two reads",
            ));
        }
        if first_kv_create(&ops[1]) != Some(rev) {
            return Ok(false);
        }
        let TxnOpResponse::Get(older) = &ops[0] else {
            return Err(Error::backend(
                "etcd lock wait",
                "txn answered a read with a write",
            ));
        };
        let Some(pred) = older.kvs().first() else {
            return Ok(true);
        };
        let seen_at = resp.header().map(|h| h.revision()).unwrap_or(0);
        match watches.deleted(pred.key(), seen_at).await {
            Ok(()) => {
                wakeups.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                // A watch the server cancelled (compaction) is not fatal:
                // look again; the caller's timeout bounds the whole wait.
                tracing::debug!(error = %e, "watch on predecessor ended; re-checking");
                tokio::time::sleep(jittered(Duration::from_millis(100), 1.0)).await;
            }
        }
    }
}

/// True when my key still exists with my create revision.
pub(crate) async fn still_mine(conn: &Conn, key: &str, rev: i64) -> Result<bool> {
    Ok(read_key(conn, key.as_bytes()).await?.created() == Some(rev))
}

/// One read of a lock key.
pub(crate) struct KeyRead {
    /// Its create revision and lease, if it exists.
    pub(crate) found: Option<(i64, i64)>,
    /// The store's revision when it was read.
    pub(crate) revision: i64,
}

impl KeyRead {
    pub(crate) fn created(&self) -> Option<i64> {
        self.found.map(|(created, _)| created)
    }
}

pub(crate) async fn read_key(conn: &Conn, key: &[u8]) -> Result<KeyRead> {
    let resp = conn
        .call("get", |mut c| async move { c.get(key, None).await })
        .await?;
    Ok(KeyRead {
        found: resp
            .kvs()
            .first()
            .map(|kv| (kv.create_revision(), kv.lease())),
        revision: resp.header().map_or(0, |h| h.revision()),
    })
}

/// Which incarnation of my key to delete.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Incarnation {
    /// The one created at this revision (the token).
    Created(i64),
    /// Whichever this lease holds now (the revision is not known yet).
    OfLease(i64),
}

/// Deletes my key if it is still the given incarnation, always by its
/// create revision. The key's name is the same for every grant of a
/// session on one lock, and a delete can be applied long after it was sent
/// (a proposal held in a partitioned link between members is delivered
/// when the link heals): a plain delete, or one that only compares the
/// lease, would then delete a later grant's key. The fault campaign caught
/// exactly that with Go's plain `Unlock` delete (etcd 3.6, seed 12: a
/// release sent during a leader partition deleted the same source's next
/// grant 34 ms after it was made, and another client was granted while it
/// held); integration test `late_release_delete_spares_the_next_grant`.
/// A release tries [`delete_answered`] first.
pub(crate) async fn unlock(conn: &Conn, key: &str, which: Incarnation) -> Result<()> {
    let rev = match which {
        Incarnation::Created(rev) => rev,
        Incarnation::OfLease(lease) => match read_key(conn, key.as_bytes()).await?.found {
            Some((rev, of)) if of == lease => rev,
            _ => return Ok(()),
        },
    };
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, rev)])
        .and_then([TxnOp::delete(key, None)]);
    conn.call("unlock txn", |mut c| {
        let txn = txn.clone();
        async move { c.txn(txn).await }
    })
    .await
    .map(drop)
}

/// Deletes my key with one plain delete, sent once: true when the server
/// answered, so the delete was applied while the caller still held the
/// source's local lock and no later incarnation of the key could exist.
/// On false the delete may still be applied later, so the caller must
/// never create this key name again (it retires the session) and falls
/// back to [`unlock`]. A plain delete costs the server less than the
/// compare txn (cycle-bench, etcd 3.6: about 5 % of an uncontended cycle).
pub(crate) async fn delete_answered(conn: &Conn, key: &str) -> bool {
    conn.try_once(|mut c| async move { c.delete(key, None).await })
        .await
        .is_some()
}

/// The current owner of a lock: its key's value and create revision.
pub(crate) async fn owner(conn: &Conn, dir: &str) -> Result<Option<(String, i64)>> {
    let resp = conn
        .call("get owner", |mut c| async move {
            c.get(dir, Some(first_created())).await
        })
        .await?;
    Ok(resp.kvs().first().map(|kv| {
        let value = String::from_utf8_lossy(kv.value()).into_owned();
        let name = if value.is_empty() {
            // Go's Mutex stores an empty value: show the key instead.
            String::from_utf8_lossy(kv.key()).into_owned()
        } else {
            value
        };
        (name, kv.create_revision())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operation without its result (etcd-client's `op_responses`
    /// unwraps it) is a backend error, not a panic (issue 54, item 6).
    #[test]
    fn an_operation_without_its_result_is_a_backend_error() {
        use etcd_client::proto::{PbResponseOp, PbTxnResponse};
        let reply = TxnResponse(PbTxnResponse {
            responses: vec![PbResponseOp { response: None }],
            ..PbTxnResponse::default()
        });
        match op_responses(&reply, "etcd lock txn") {
            Err(Error::Backend { .. }) => {}
            other => panic!("{other:?}"),
        }
        let empty = TxnResponse(PbTxnResponse::default());
        assert!(op_responses(&empty, "etcd lock txn").unwrap().is_empty());
    }

    fn backend_message(result: Result<Attempt>) -> String {
        match result {
            Err(Error::Backend { context, source }) => format!("{context}: {source}"),
            Err(other) => panic!("expected a backend error, got {other:?}"),
            Ok(a) => panic!(
                "a malformed reply was read as rev {} owner {}",
                a.rev, a.owner
            ),
        }
    }

    #[test]
    fn a_well_formed_reply_is_read() {
        let created = read_attempt(true, Some(7), &[OpRead::Other, OpRead::Get(Some(7))]).unwrap();
        assert!((created.rev, created.owner, created.existed) == (7, true, false));
        let waiting = read_attempt(true, Some(9), &[OpRead::Other, OpRead::Get(Some(7))]).unwrap();
        assert!(!waiting.owner);
        let again =
            read_attempt(false, Some(12), &[OpRead::Get(Some(9)), OpRead::Get(None)]).unwrap();
        assert!((again.rev, again.owner, again.existed) == (9, true, true));
    }

    /// A reply with fewer operations than the txn sent (a buggy proxy or
    /// server) is a backend error naming what is missing, never a panic.
    #[test]
    fn a_reply_missing_operations_is_a_backend_error() {
        for (succeeded, ops) in [
            (true, vec![]),
            (true, vec![OpRead::Other]),
            (false, vec![]),
            (false, vec![OpRead::Get(Some(9))]),
        ] {
            let message = backend_message(read_attempt(succeeded, Some(9), &ops));
            assert!(
                message.contains("where the txn sent 2"),
                "{ops:?}: {message}"
            );
        }
    }

    /// Key for key Go's `concurrency.Mutex`: `PREFIX/RESOURCE/LEASE-IN-HEX`.
    #[test]
    fn keys_are_laid_out_as_gos_mutex_lays_them() {
        let r = ResourceName::new("orders").unwrap();
        assert_eq!(lock_dir("fencing", &r), "fencing/orders/");
        let keys = LockKeys::new("fencing", &r, 0x694d_71c2);
        assert_eq!(keys.dir, "fencing/orders/");
        assert_eq!(keys.mine, "fencing/orders/694d71c2");
        assert!(check_resource(&r).is_ok());
        let nested = ResourceName::nonportable("orders/eu").unwrap();
        assert!(matches!(
            check_resource(&nested),
            Err(Error::InvalidResource { .. })
        ));
    }

    fn get(created: &[i64]) -> TxnOpResponse {
        use etcd_client::proto::{PbKeyValue, PbRangeResponse};
        let kvs = created
            .iter()
            .map(|&create_revision| PbKeyValue {
                create_revision,
                ..PbKeyValue::default()
            })
            .collect();
        TxnOpResponse::Get(etcd_client::GetResponse(PbRangeResponse {
            kvs,
            ..PbRangeResponse::default()
        }))
    }

    /// A read's first key gives its create revision; an empty read none,
    /// and a write is not a read.
    #[test]
    fn a_read_gives_its_first_keys_create_revision() {
        let put = TxnOpResponse::Put(etcd_client::PutResponse(
            etcd_client::proto::PbPutResponse::default(),
        ));
        assert_eq!(first_kv_create(&get(&[7, 9])), Some(7));
        assert_eq!(first_kv_create(&get(&[])), None);
        assert_eq!(first_kv_create(&put), None);
        assert_eq!(OpRead::of(&get(&[7, 9])), OpRead::Get(Some(7)));
        assert_eq!(OpRead::of(&get(&[])), OpRead::Get(None));
        assert_eq!(OpRead::of(&put), OpRead::Other);
        let read = KeyRead {
            found: Some((7, 0x2a)),
            revision: 9,
        };
        assert_eq!(read.created(), Some(7));
        let missing = KeyRead {
            found: None,
            revision: 9,
        };
        assert_eq!(missing.created(), None);
    }

    /// A reply without a usable revision for my key (no header, or 0) is
    /// an error: revision 0 would be a token below every real one.
    #[test]
    fn a_reply_without_my_keys_revision_is_a_backend_error() {
        let ops = [OpRead::Other, OpRead::Get(None)];
        for revision in [None, Some(0)] {
            let message = backend_message(read_attempt(true, revision, &ops));
            assert!(message.contains("my own key"), "{message}");
        }
        let again = [OpRead::Get(None), OpRead::Get(None)];
        let message = backend_message(read_attempt(false, Some(12), &again));
        assert!(message.contains("my own key"), "{message}");
    }

    /// A write where the txn sent a read is not "no older key": taking it
    /// for one would grant a lock someone else owns.
    #[test]
    fn a_write_where_a_read_was_sent_is_a_backend_error() {
        let ops = [OpRead::Other, OpRead::Other];
        let message = backend_message(read_attempt(true, Some(9), &ops));
        assert!(message.contains("oldest key"), "{message}");
    }
}
