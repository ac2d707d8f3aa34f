//! What an administrator does to an etcd or ZooKeeper lock behind its
//! holder's back: deletes the holder's key or node ("break a stuck lock").
//! The holder must hear of it and stop, `fence run` at once (its loss was
//! reported by the server, so no lease time is left to spend), and the gate
//! must refuse whatever it still writes. Run by the campaign's hidden
//! `delete-holders` helper inside a member's namespace. Also the other
//! hidden helpers' work: inspecting who holds, and etcd's maintenance.

use std::time::Duration;

use fencing::ResourceName;
use fencing_etcd::etcd_client::{self, GetOptions, SortOrder, SortTarget};
use fencing_zookeeper::zookeeper_client;

/// The campaign's lock path (`…/campaign` in every source URL).
const PATH: &str = "/campaign";

/// Deletes the holder's key (etcd) or node (ZooKeeper) of each of `locks`
/// through the member at `endpoint`; says which went.
pub async fn delete_holders(
    endpoint: &str,
    zookeeper: bool,
    locks: &[String],
) -> Result<String, String> {
    let mut deleted = Vec::new();
    for lock in locks {
        let gone = if zookeeper {
            delete_zk_holder(endpoint, lock)
                .await
                .map_err(|e| e.to_string())
        } else {
            delete_etcd_holder(endpoint, lock)
                .await
                .map_err(|e| e.to_string())
        };
        if let Some(key) = gone.map_err(|e| format!("{lock}: {e}"))? {
            deleted.push(key);
        }
    }
    Ok(format!("deleted {deleted:?}"))
}

/// The key with the lowest create revision under the lock's prefix holds it.
async fn delete_etcd_holder(
    endpoint: &str,
    lock: &str,
) -> Result<Option<String>, etcd_client::Error> {
    let mut client = etcd_client::Client::connect([endpoint], None).await?;
    let dir = format!("{PATH}/{lock}/");
    let first = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
        .with_keys_only();
    let found = client.get(dir, Some(first)).await?;
    let Some(kv) = found.kvs().first() else {
        return Ok(None);
    };
    let key = kv.key_str()?.to_owned();
    client.delete(key.as_str(), None).await?;
    Ok(Some(key))
}

/// The child with the lowest sequence number (Curator's order) holds it.
async fn delete_zk_holder(
    endpoint: &str,
    lock: &str,
) -> Result<Option<String>, zookeeper_client::Error> {
    let client = zookeeper_client::Client::connect(endpoint).await?;
    let dir = format!("{PATH}/{lock}");
    let children = match client.list_children(&dir).await {
        Err(zookeeper_client::Error::NoNode) => return Ok(None),
        other => other?,
    };
    let sequence = |name: &String| name.rsplit("lock-").next().unwrap_or_default().to_owned();
    let Some(first) = children.iter().min_by_key(|c| sequence(c)) else {
        return Ok(None);
    };
    let path = format!("{dir}/{first}");
    match client.delete(&path, None).await {
        Ok(()) => Ok(Some(path)),
        // Released meanwhile.
        Err(zookeeper_client::Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A holder of the campaign's `locks` through `source` (`RESOURCE: HOLDER`),
/// or `none` as soon as no lock has one; a holder seen before `within`
/// has passed is looked at again until then (it may be on its way out).
/// On Kubernetes a Lease named to a `killed` client process is left out:
/// nothing but another candidate ends it, as a session's expiry would.
pub async fn inspect(
    source: &str,
    within: Duration,
    locks: &[String],
    killed: &[u32],
) -> Result<String, String> {
    let kube = source.starts_with("kube:");
    let opening = fencing::connect(source);
    let source = match tokio::time::timeout(Duration::from_secs(15), opening).await {
        Ok(Ok(source)) => source,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("opening the source took over 15 s".into()),
    };
    let deadline = tokio::time::Instant::now() + within;
    let give_up_at = deadline + Duration::from_secs(20);
    let mut locks = locks
        .iter()
        .map(|l| ResourceName::new(l).map_err(|e| e.to_string()));
    let mut resource = locks.next().ok_or("no lock to inspect")??;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), source.holder(&resource)).await {
            Ok(Ok(None)) => match locks.next() {
                Some(next) => resource = next?,
                None => return Ok("none".into()),
            },
            // client-go's release is one attempt: under a partition it
            // fails and the program exits, leaving the Lease named to it.
            // That is the anchor's behaviour, not ours; said, not counted.
            Ok(Ok(Some(holder)))
                if anchor_named(&holder.holder)
                    || (kube && killed.contains(&identity_pid(&holder.holder))) =>
            {
                eprintln!("inspect: {resource} is still named to a killed client or the anchor: {holder:?}");
                match locks.next() {
                    Some(next) => resource = next?,
                    None => return Ok("none".into()),
                }
            }
            Ok(Ok(Some(holder))) if tokio::time::Instant::now() >= deadline => {
                return Ok(format!("{resource}: {holder:?}"));
            }
            Ok(Ok(Some(_))) => tokio::time::sleep(Duration::from_millis(200)).await,
            // A cluster just out of its last fault may still be electing (etcd
            // 3.4 stalls for seconds): the question is what it holds, not how
            // fast it answers, so failed reads are retried for a while.
            other if tokio::time::Instant::now() < give_up_at => {
                eprintln!("inspect: {other:?}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => return Err(format!("{other:?}")),
        }
    }
}

/// The process id in a default holder identity (`HOST-PID-SUFFIX`), 0 when
/// it has none.
fn identity_pid(holder: &str) -> u32 {
    holder
        .rsplit('-')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// A holder identity of the anchor client (`clientgo6-PID` on Kubernetes).
fn anchor_named(holder: &str) -> bool {
    let client = holder.split('-').next().unwrap_or(holder);
    super::checker::is_anchor(client)
}

/// Compacts the etcd member at `endpoint`'s history up to now and
/// defragments it (the campaign's maintenance fault); says what it did.
pub async fn maintain(endpoint: &str) -> Result<String, etcd_client::Error> {
    let mut client = etcd_client::Client::connect([endpoint], None).await?;
    let revision = client
        .get("campaign-maintenance", None)
        .await?
        .header()
        .map_or(0, |h| h.revision());
    let physical = etcd_client::CompactionOptions::new().with_physical();
    client.compact(revision, Some(physical)).await?;
    let started = std::time::Instant::now();
    client.defragment().await?;
    Ok(format!(
        "compacted at {revision}, defragmented in {} ms",
        started.elapsed().as_millis()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_is_read_from_a_default_identity_only() {
        assert_eq!(identity_pid("vm-2756-383c85f2"), 2756);
        assert_eq!(identity_pid("my-host-name-17-0123abcd"), 17);
        assert_eq!(identity_pid("clientgo6-2417"), 0);
        assert_eq!(identity_pid("anything"), 0);
    }
}
