//! A session: one etcd lease kept alive by our own loop, shared by every
//! grant taken through it. Lock keys are attached to the lease, so when the
//! lease ends every grant of the session ends with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{GetOptions, LeaseKeepAliveStream, LeaseKeeper};
use fencing_core::backend::{LeaseGroup, LeaseTracker, SentAt};
use fencing_core::{Error, LossReason, Result};
use tokio::task::JoinHandle;
use tracing::Instrument;

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
    /// Grants a lease and starts keeping it alive. `vouch_key` is a key the
    /// client may read (the source's prefix): each renewal counts only once
    /// a linearizable read of it vouches for the leader that renewed.
    pub(crate) async fn start(
        conn: &Conn,
        ttl: Duration,
        vouch_key: &str,
    ) -> Result<(Session, etcd_client::ResponseHeader)> {
        let sent = SentAt::now();
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let mut resp = conn
            .call("lease grant", |mut c| async move {
                c.lease_grant(secs, None).await
            })
            .await?;
        let header = resp
            .take_header()
            .ok_or_else(|| Error::backend("etcd lease grant", "response without header"))?;
        // Counted for what we asked, not what the member that answered
        // granted: each member's lessor raises a lease to its own minimum
        // (1.5 election timeouts, whole seconds) when it applies the grant,
        // so a member with a long election timeout answers, say, 8 s where
        // its peers keep 2 s, and a peer that takes over revokes the lease
        // after 2 s + one election timeout (etcd::partitions saw the next
        // holder granted 4.1-4.8 s after a cut, while an 8 s count ran to
        // 6.7 s). No member keeps less than we asked.
        let counted = resp.ttl().min(secs).max(1);
        let ttl = Duration::from_secs(u64::try_from(counted).unwrap_or(1));
        let group = Arc::new(LeaseGroup::new(sent, ttl));
        let renewer = Renewer {
            conn: conn.clone(),
            id: resp.id(),
            ttl,
            vouch_key: vouch_key.as_bytes().to_vec(),
        };
        // A span of its own, not the acquire's that opened the session.
        let span = tracing::debug_span!(parent: None, "fencing.renew", backend = "etcd", lease = resp.id());
        let keeper = tokio::spawn(keep_alive(renewer, group.clone()).instrument(span));
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
            async move {
                match c.lease_revoke(id).await {
                    // Expired at the server already (a paused process, or
                    // a retry after a lost reply): what a revoke wants.
                    Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::NotFound => {
                        Ok(())
                    }
                    done => done.map(drop),
                }
            }
        })
        .await
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
/// has time left. Each attempt (keep-alive and vouching read) is bounded by
/// half a period, so several fit before the local deadline ends the session.
async fn keep_alive(renewer: Renewer, group: Arc<LeaseGroup>) {
    let period = renewer.ttl / 3;
    let id = renewer.id;
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
        let sent = SentAt::now();
        let failure = match tokio::time::timeout(period / 2, renewer.renew(&mut stream)).await {
            Ok(Ok(granted)) => {
                if !group.renewed(sent, Duration::from_secs(granted)) {
                    return;
                }
                wait = period;
                continue;
            }
            Ok(Err(Renewal::Expired)) => {
                group.lose(
                    LossReason::SessionExpired,
                    "etcd lease expired (keep-alive answered TTL 0)",
                );
                return;
            }
            Ok(Err(Renewal::Failed(e))) => e,
            Err(_) => format!("no answer within {:?}", period / 2),
        };
        tracing::warn!(lease = format_args!("{id:x}"), error = %failure, "etcd keep-alive failed; retrying on a new stream");
        stream = None;
        wait = RETRY_PAUSE;
    }
}

/// The shortest TTL measured to survive any single member kill, pause or
/// restart with quorum intact (integration/harness/src/scenarios/member_faults.rs).
const RIDES_THROUGH_FAILOVER: Duration = Duration::from_secs(5);

/// Pause before a failed renewal is tried again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

enum Renewal {
    Expired,
    Failed(String),
}

/// What one renewal needs.
struct Renewer {
    conn: Conn,
    id: i64,
    /// The TTL the lease is counted for (see [`Session::start`]).
    ttl: Duration,
    vouch_key: Vec<u8>,
}

impl Renewer {
    /// One keep-alive round trip, vouched for by a quorum; returns the TTL
    /// the server granted (whole seconds).
    ///
    /// # Why a renewal needs a quorum read after it
    ///
    /// etcd answers a keep-alive on the leader from its lessor alone: 3.4
    /// before 3.4.31 (Debian's 3.4.23 among them) asks no one, and the
    /// `ensureLeadership` of 3.4.31 on and 3.6 passes while the member
    /// still ticks. A leader cut off from its peers therefore renews leases
    /// until CheckQuorum deposes it, up to two of its election timeouts
    /// after the cut, while the others elect a leader whose lessor gives
    /// each lease only one election timeout + TTL from its promotion and
    /// then revokes it (the renewal was never replicated: renewals are not
    /// raft entries). Counting such a renewal overlaps the next holder.
    ///
    /// So each keep-alive is followed by a linearizable read, and the
    /// renewal counts only when both replies carry the same `raft_term`.
    /// That field is not the answering member's current term but the term
    /// of the last entry it has applied (etcd 3.4 and 3.6 alike). A
    /// keep-alive's header is filled as the request arrives, before the
    /// member renews it or forwards it to the leader; a read's header after
    /// the read was served.
    ///
    /// Argument. Let `s` be the keep-alive's send time, `K` its reply's
    /// term and `V` the read's. etcd serves the read only after the leader
    /// of some term `R` heard a quorum `Q` acknowledge a heartbeat sent
    /// after the read arrived (so after `s`), and only once the member has
    /// applied an entry that leader committed in `R`; so `V >= R`.
    /// 1. Every leader elected before `s` has a term of at most `R`: a
    ///    quorum that took a higher term before `s` would share a member
    ///    with `Q`, and raft refuses a heartbeat of a lower term.
    /// 2. The member that took the keep-alive had applied an entry of term
    ///    `K`, so its own term was at least `K`, and it only grows. It
    ///    renews on its own lessor only while it leads, and otherwise
    ///    forwards to the leader it knows for its current term: the lessor
    ///    that renewed belongs to a leader of a term `L >= K`, and renewed
    ///    at or after `s`.
    ///
    /// With `K == V`: `L >= V >= R`, so by 1 every leader of a term above
    /// `L` (and the renewer itself, if `L > R`) was elected after `s`, and
    /// a new leader's lessor gives each lease at least a TTL from its
    /// promotion. Our deadline, TTL from `s` less the drift margin, is thus
    /// never past the lease's end on the renewer or any later leader.
    ///
    /// This holds for any cluster size. A follower that forwards to a
    /// leader deposed before `s` fixed `K <= L` before forwarding, while
    /// that leader's successor has a term above `L` and at most `R <= V`
    /// (by 1): `K < V`, and the renewal is refused, even if the follower
    /// learns the new term while its forward is in flight.
    ///
    /// Behind etcd's grpc-proxy the argument fails: the proxy renews each
    /// lease on its own schedule and hands whichever reply comes next to a
    /// waiting client, so a keep-alive may be answered by a renewal sent
    /// before `s`. The docs say the proxy is not supported; nothing in the
    /// reply tells it apart (its headers are the members').
    ///
    /// When the read fails, times out, or reports another term, the renewal
    /// is not counted and is tried again: a deposed leader cannot vouch for
    /// itself, and a lease renewed only on it runs out on our clock first.
    async fn renew(
        &self,
        stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    ) -> std::result::Result<u64, Renewal> {
        let (keeper, replies) = match stream {
            Some(s) => s,
            None => {
                // Opening the stream sends a first keep-alive and reads its
                // reply, which the crate checks (TTL > 0) without handing
                // it over: its term is unknown, so it is not counted, and
                // the keep-alive below is the one that counts.
                let opened = self.conn.client().lease_keep_alive(self.id).await;
                match opened {
                    Ok(s) => stream.insert(s),
                    Err(etcd_client::Error::LeaseKeepAliveError(msg))
                        if msg.contains("not found") =>
                    {
                        return Err(Renewal::Expired);
                    }
                    Err(e) => return Err(Renewal::Failed(e.to_string())),
                }
            }
        };
        keeper
            .keep_alive()
            .await
            .map_err(|e| Renewal::Failed(e.to_string()))?;
        let reply = match replies.message().await {
            Ok(Some(reply)) if reply.ttl() <= 0 => return Err(Renewal::Expired),
            Ok(Some(reply)) => reply,
            Ok(None) => return Err(Renewal::Failed("stream closed".into())),
            Err(e) => return Err(Renewal::Failed(e.to_string())),
        };
        let term = reply.header().map(|h| h.raft_term());
        let vouched = self.vouching_term().await?;
        if term != Some(vouched) {
            return Err(Renewal::Failed(format!(
                "keep-alive answered in raft term {term:?}, but a quorum read after it in term \
                 {vouched}: the renewal may not outlive a leader change"
            )));
        }
        // A member's TTL may exceed what its peers keep (see `start`).
        Ok((reply.ttl().max(1) as u64).min(self.ttl.as_secs()))
    }

    /// The raft term of a linearizable read sent now.
    async fn vouching_term(&self) -> std::result::Result<u64, Renewal> {
        let resp = self
            .conn
            .call("lease renewal vouch (linearizable read)", |mut c| {
                let key = self.vouch_key.clone();
                async move { c.get(key, Some(GetOptions::new().with_count_only())).await }
            })
            .await
            .map_err(|e| Renewal::Failed(e.to_string()))?;
        resp.header()
            .map(|h| h.raft_term())
            .ok_or_else(|| Renewal::Failed("read answered without a header".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session around a group, with a keeper that never ends by itself
    /// (the keep-alive loop needs a cluster; what is tested here is what
    /// the session decides from its lease and its retirement).
    fn session(ttl: Duration) -> (Session, tokio::task::AbortHandle) {
        let keeper = tokio::spawn(std::future::pending::<()>());
        let abort = keeper.abort_handle();
        let session = Session {
            lease_id: 0x2a,
            ttl,
            group: Arc::new(LeaseGroup::new(SentAt::now(), ttl)),
            keeper,
            retired: AtomicBool::new(false),
        };
        (session, abort)
    }

    /// Only a live session that was not retired takes new grants; a
    /// retired one keeps the grants it has.
    #[tokio::test]
    async fn only_a_live_unretired_session_serves_new_grants() {
        let (live, _) = session(Duration::from_secs(10));
        assert!(live.serves_new_grants());
        let grant = live.track_grant();
        live.retire();
        assert!(!live.serves_new_grants(), "retired");
        assert!(grant.is_live(), "retiring ends no grant");
        live.retire();
        assert!(!live.serves_new_grants(), "retired twice");

        // A lease of no time at all is past its deadline at once.
        let (expired, _) = session(Duration::ZERO);
        assert!(!expired.serves_new_grants(), "lease past its deadline");
        assert_eq!(expired.lost().await, LossReason::ExpiredLocally);
    }

    /// A grant follows its session's lease: lost with it, for the same
    /// reason.
    #[tokio::test]
    async fn a_grant_is_lost_with_its_session() {
        let (s, _) = session(Duration::from_secs(10));
        let grant = s.track_grant();
        s.group.lose(LossReason::SessionExpired, "lease revoked");
        assert!(!s.lease().is_live());
        assert_eq!(grant.loss_reason(), Some(LossReason::SessionExpired));
        assert_eq!(s.lost().await, LossReason::SessionExpired);
    }

    /// Dropping a session stops its keep-alive loop: a dropped session
    /// must not renew its lease forever.
    #[tokio::test]
    async fn dropping_a_session_stops_its_keeper() {
        let (s, keeper) = session(Duration::from_secs(10));
        tokio::task::yield_now().await;
        assert!(!keeper.is_finished());
        drop(s);
        for _ in 0..100 {
            if keeper.is_finished() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the keeper still runs after its session was dropped");
    }
}
