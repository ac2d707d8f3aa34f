//! Our heartbeat on a ZooKeeper session, and which of its answers may
//! renew the lease the session's grants share.
//!
//! # What the leader knows, and when
//!
//! The leader expires a session a session timeout after it last *touched*
//! it. A request sent to the leader touches it on arrival. A request sent
//! to a follower touches it only there: the follower reports the sessions
//! it heard from in its answer to the leader's next ping (the leader pings
//! every tickTime/2), and the forwarded request itself touches nothing at
//! the leader. A follower cut off right after forwarding our request never
//! sends that answer, so the leader's last touch may be older than the
//! request, by as long as the client went quiet before it. A lease counted
//! from the send time of every answered request therefore ran past the
//! session's expiry under load (issue 54: the next holder was granted
//! 4-65 ms before the old one's deadline).
//!
//! What an answer does prove: the follower writes its ping answers and
//! the requests it forwards to the leader on one TCP stream, and the
//! leader reads that stream in order. So when a heartbeat is answered
//! (a quorum transaction, which went through the leader), every ping
//! answer the follower wrote before forwarding it was read by the leader
//! first. If the follower received a ping between an earlier heartbeat and
//! this one, its answer reported the earlier one's touch, and the leader
//! applied it before it could take this heartbeat, so before it could have
//! marked the session expired (it refuses a transaction of a session it
//! is expiring). A ping comes every tickTime/2, and ZooKeeper refuses a
//! session timeout under two ticks unless `minSessionTimeout` is set
//! lower: a quarter of the timeout between the earlier heartbeat's answer
//! and this one's send leaves room for a ping. Then the session lives at
//! least a timeout after the earlier heartbeat's send, also across a
//! reconnect (the new server revalidates the session with the leader,
//! which touches it) and a new leader (which starts every session's
//! timeout afresh). The lease is counted from there; the core's drift
//! margin comes on top.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::backend::{LeaseGroup, SentAt};
use fencing_core::LossReason;
use tokio::time::Instant;
use zookeeper_client::Client;

use crate::session::{close, Dialer};

/// The answered heartbeats (and the session's creation) that a later
/// answer may vouch for, oldest first.
#[derive(Debug)]
pub(crate) struct Vouching {
    answered: VecDeque<(SentAt, Instant)>,
    /// How long after an answer a later heartbeat must be sent to vouch
    /// for it: a ping period, a quarter of the session timeout at most.
    gap: Duration,
}

impl Vouching {
    /// Starts with the session's creation, sent at `created` and answered
    /// at `answered`: the leader started the session's timeout when it
    /// created it, after the send.
    pub(crate) fn new(timeout: Duration, created: SentAt, answered: Instant) -> Self {
        Vouching {
            answered: VecDeque::from([(created, answered)]),
            gap: timeout / 4,
        }
    }

    /// Records a heartbeat sent at `sent` and answered at `answered`.
    /// Returns the send time the lease may now be counted from: the latest
    /// earlier answer at least [`Self::gap`] before `sent`, if there is one
    /// not used before.
    pub(crate) fn answered(&mut self, sent: SentAt, answered: Instant) -> Option<SentAt> {
        let mut vouched = None;
        while let Some(&(earlier, at)) = self.answered.front() {
            if at + self.gap > sent.instant() {
                break;
            }
            vouched = Some(earlier);
            self.answered.pop_front();
        }
        self.answered.push_back((sent, answered));
        vouched
    }
}

/// Every timeout/10 a quorum round trip ([`confirmed_by_quorum`]), each
/// given up to timeout/3 (a new leader's election); each answer renews the
/// shared lease for the whole timeout from the heartbeat it vouches for
/// (see the module's documentation). A terminal session state loses
/// everything at once.
///
/// Why a quorum: a follower cut off from its leader answers reads for up
/// to syncLimit x tickTime, and a leader cut off from its followers answers
/// reads and `sync`s until it counts syncLimit ticks without a quorum, by
/// which time the followers may have elected a new leader that expires the
/// session first. A transaction is answered only by way of a leader that
/// a quorum follows. `zk::partitions` in the integration tests makes both
/// partitions.
pub(crate) async fn heartbeat(
    client: Client,
    dialer: Dialer,
    group: Arc<LeaseGroup>,
    mut vouching: Vouching,
) {
    let timeout = client.session_timeout();
    // Often enough that the lease, counted from a heartbeat three periods
    // back, outlasts an election right after a renewal (at least half the
    // timeout left; integration/tests/tests/timing.rs).
    let period = timeout / 10;
    let mut states = client.state_watcher();
    let ended = loop {
        tokio::select! {
            _ = group.lease().lost() => break None,
            state = states.changed() => {
                if state.is_terminated() {
                    break Some(state);
                }
            }
            _ = tokio::time::sleep(period) => {
                let sent = SentAt::now();
                let confirmed = tokio::time::timeout(timeout / 3, confirmed_by_quorum(&client)).await;
                tracing::debug!(took = ?sent.instant().elapsed(), ?confirmed, "ZooKeeper heartbeat");
                if let Ok(true) = confirmed {
                    let vouched = vouching.answered(sent, Instant::now());
                    tracing::debug!(from_ago = ?vouched.map(|v| v.instant().elapsed()), "ZooKeeper lease renewed");
                    if vouched.is_some_and(|from| !group.renewed(from, timeout)) {
                        break None;
                    }
                }
            }
        }
    };
    if let Some(state) = ended {
        group.lose(
            LossReason::SessionExpired,
            &format!("ZooKeeper session {state:?}"),
        );
        return;
    }
    if group.lease().loss_reason() == Some(LossReason::Released) {
        // Closed by its source, which closes it at the server too.
        return;
    }
    group.lose(
        LossReason::ExpiredLocally,
        "ZooKeeper session may have expired: no answer within the session timeout",
    );
    let session = client.session().clone();
    drop(client);
    close(&dialer, session, states).await;
}

/// A multi holding one version check of `/` (any version): a transaction
/// that changes nothing, answered only after a quorum of the current
/// leader's ensemble logged it, and refused if the session has expired.
async fn confirmed_by_quorum(client: &Client) -> bool {
    let mut writer = client.new_multi_writer();
    if writer.add_check_version("/", -1).is_err() {
        return false;
    }
    writer.commit().await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(1);
    const ANSWER: Duration = Duration::from_millis(5);

    /// Heartbeats every timeout/10, each answered at once: each answer
    /// vouches for the heartbeat three back (the one two back was answered
    /// less than a quarter timeout before), never for itself.
    #[tokio::test(start_paused = true)]
    async fn an_answer_vouches_for_a_heartbeat_a_quarter_timeout_older() {
        let created = SentAt::now();
        let mut v = Vouching::new(TIMEOUT, created, created.instant() + ANSWER);
        let mut sent = vec![created];
        for k in 1..=10u32 {
            tokio::time::advance(TIMEOUT / 10 - ANSWER).await;
            let now = SentAt::now();
            tokio::time::advance(ANSWER).await;
            let vouched = v.answered(now, Instant::now()).map(SentAt::instant);
            sent.push(now);
            let expected = (k >= 3).then(|| sent[k as usize - 3].instant());
            assert_eq!(vouched, expected, "heartbeat {k}");
        }
    }

    /// The run of issue 54: the client went quiet, then a heartbeat was
    /// answered; the follower was cut off right after forwarding it. That
    /// answer must not renew the lease from its own send time, only from
    /// an answer a quarter timeout before it (before: from its own).
    #[tokio::test(start_paused = true)]
    async fn a_lone_answer_vouches_for_nothing_newer_than_a_quarter_timeout() {
        let created = SentAt::now();
        let mut v = Vouching::new(TIMEOUT, created, created.instant() + ANSWER);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(v.answered(SentAt::now(), Instant::now()).is_none());
        tokio::time::advance(Duration::from_millis(400)).await;
        let lone = SentAt::now();
        let from = v.answered(lone, lone.instant() + ANSWER).unwrap();
        assert!(from.instant() + TIMEOUT / 4 <= lone.instant());
    }

    /// A heartbeat answered late (a leader's election) vouches for what
    /// was answered a quarter timeout before it was *sent*, not answered.
    #[tokio::test(start_paused = true)]
    async fn a_late_answer_counts_from_its_send_time() {
        let created = SentAt::now();
        let mut v = Vouching::new(TIMEOUT, created, created.instant() + ANSWER);
        tokio::time::advance(Duration::from_millis(200)).await;
        let slow = SentAt::now();
        // Answered 700 ms later: the creation was answered only 195 ms
        // before this heartbeat was sent.
        assert!(v
            .answered(slow, slow.instant() + Duration::from_millis(700))
            .is_none());
    }
}
