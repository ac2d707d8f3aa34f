//! A session: one etcd lease kept alive by our own loop, shared by every
//! grant taken through it. Lock keys are attached to the lease, so when the
//! lease ends every grant of the session ends with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use fencing_core::backend::{LeaseGroup, LeaseTracker};
use fencing_core::{Error, LossReason, Result};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::conn::Conn;

pub(crate) struct Session {
    pub(crate) lease_id: i64,
    pub(crate) ttl: Duration,
    /// Shared with the keep-alive loop, which renews and loses it.
    group: Arc<LeaseGroup>,
    keeper: JoinHandle<()>,
    /// Set when a delete of one of its keys may still be applied late:
    /// new grants then take a new session (new key names); the grants it
    /// has keep it alive until they end.
    retired: AtomicBool,
}

impl Session {
    /// Grants a lease and starts keeping it alive.
    pub(crate) async fn start(
        conn: &Conn,
        ttl: Duration,
    ) -> Result<(Session, etcd_client::ResponseHeader)> {
        let sent = Instant::now();
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let mut resp = conn
            .call("lease grant", |mut c| async move {
                c.lease_grant(secs, None).await
            })
            .await?;
        let header = resp
            .take_header()
            .ok_or_else(|| Error::backend("etcd lease grant", "response without header"))?;
        let ttl = Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(0).max(1));
        let group = Arc::new(LeaseGroup::new(sent, ttl));
        let keeper = tokio::spawn(keep_alive(conn.clone(), resp.id(), ttl, group.clone()));
        if ttl < RIDES_THROUGH_FAILOVER {
            tracing::warn!(
                ?ttl,
                "etcd lease shorter than 5 s: one failed member can cost it"
            );
        }
        tracing::debug!(
            lease = format_args!("{:x}", resp.id()),
            ?ttl,
            "etcd session started"
        );
        Ok((
            Session {
                lease_id: resp.id(),
                ttl,
                group,
                keeper,
                retired: AtomicBool::new(false),
            },
            header,
        ))
    }

    /// Live and not retired: fit for a new grant.
    pub(crate) fn serves_new_grants(&self) -> bool {
        self.group.lease().is_live() && !self.retired.load(Ordering::Relaxed)
    }

    /// No new grant may use this session's key names again.
    pub(crate) fn retire(&self) {
        if !self.retired.swap(true, Ordering::Relaxed) {
            tracing::debug!(
                lease = format_args!("{:x}", self.lease_id),
                "etcd session retired"
            );
        }
    }

    /// Resolves when the session's lease is or may be gone.
    pub(crate) async fn lost(&self) -> LossReason {
        self.group.lease().lost().await
    }

    /// A tracker for a new grant on this session, renewed with it.
    pub(crate) fn track_grant(&self) -> LeaseTracker {
        self.group.track()
    }

    /// The session's own lease, which its grants follow.
    pub(crate) fn lease(&self) -> &LeaseTracker {
        self.group.lease()
    }

    /// Ends the lease at the server at once (every key on it is deleted).
    pub(crate) async fn revoke(&self, conn: &Conn) -> Result<()> {
        self.keeper.abort();
        self.group.lose(LossReason::Released, "session closed");
        conn.call("lease revoke", |mut c| {
            let id = self.lease_id;
            async move { c.lease_revoke(id).await }
        })
        .await
        .map(drop)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// Renews every TTL/3. A reply with TTL 0 ends the session. A failed or
/// unanswered renewal is retried on a fresh stream after a short pause, not
/// a whole period later: when the member carrying the stream dies or
/// stalls, the next attempts reach another member while the lease still
/// has time left. Each attempt is bounded by half a period, so several fit
/// before the local deadline ends the session.
async fn keep_alive(conn: Conn, id: i64, ttl: Duration, group: Arc<LeaseGroup>) {
    let period = ttl / 3;
    let mut stream: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut wait = period;
    loop {
        tokio::select! {
            _ = group.lease().lost() => {
                group.lose(LossReason::ExpiredLocally, "etcd lease deadline passed without a confirmed renewal");
                return;
            }
            _ = tokio::time::sleep(wait) => {}
        }
        let sent = Instant::now();
        let attempt = renew_once(&conn, id, ttl.as_secs() as i64, &mut stream);
        let failure = match tokio::time::timeout(period / 2, attempt).await {
            Ok(Ok(granted)) if granted > 0 => {
                if !group.renewed(sent, Duration::from_secs(granted as u64)) {
                    return;
                }
                wait = period;
                continue;
            }
            Ok(Ok(_)) | Ok(Err(Renewal::Expired)) => {
                group.lose(
                    LossReason::SessionExpired,
                    "etcd lease expired (keep-alive answered TTL 0)",
                );
                return;
            }
            Ok(Err(Renewal::Failed(e))) => e.to_string(),
            Err(_) => format!("no answer within {:?}", period / 2),
        };
        tracing::warn!(lease = format_args!("{id:x}"), error = %failure, "etcd keep-alive failed; retrying on a new stream");
        stream = None;
        wait = RETRY_PAUSE;
    }
}

/// The shortest TTL measured to survive any single member kill, pause or
/// restart with quorum intact (integration/tests/member_faults.rs).
const RIDES_THROUGH_FAILOVER: Duration = Duration::from_secs(5);

/// Pause before a failed renewal is tried again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

enum Renewal {
    Expired,
    Failed(etcd_client::Error),
}

/// One keep-alive round trip; returns the TTL the server granted.
async fn renew_once(
    conn: &Conn,
    id: i64,
    lease_ttl: i64,
    stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
) -> std::result::Result<i64, Renewal> {
    let (keeper, replies) = match stream {
        Some(s) => s,
        None => {
            // Opening the stream sends a first keep-alive and reads its reply.
            let opened = conn.client().lease_keep_alive(id).await;
            return match opened {
                Ok(s) => {
                    // The crate checked that reply (TTL > 0) without handing
                    // it over; the lease keeps the TTL it was granted with.
                    *stream = Some(s);
                    Ok(lease_ttl)
                }
                Err(etcd_client::Error::LeaseKeepAliveError(msg)) if msg.contains("not found") => {
                    Err(Renewal::Expired)
                }
                Err(e) => Err(Renewal::Failed(e)),
            };
        }
    };
    keeper.keep_alive().await.map_err(Renewal::Failed)?;
    match replies.message().await {
        Ok(Some(reply)) if reply.ttl() <= 0 => Err(Renewal::Expired),
        Ok(Some(reply)) => Ok(reply.ttl()),
        Ok(None) => Err(Renewal::Failed(etcd_client::Error::LeaseKeepAliveError(
            "stream closed".into(),
        ))),
        Err(e) => Err(Renewal::Failed(e)),
    }
}
