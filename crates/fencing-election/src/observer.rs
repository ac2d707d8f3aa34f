//! Followers' view: the current leader and every change.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use fencing_core::backend::with_timeout;
use fencing_core::{FencingSource, FencingToken, HolderInfo, ResourceName, Result};
use tokio::time::{Instant, Sleep};

/// Who leads, as a follower sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader published: its
    /// [`ElectionConfig::identity`](crate::ElectionConfig::identity).
    pub identity: String,
    /// The token of the leader's term.
    pub token: FencingToken,
}

impl From<HolderInfo> for Leader {
    fn from(h: HolderInfo) -> Self {
        Leader {
            identity: h.holder,
            token: h.token,
        }
    }
}

type Query = Pin<Box<dyn Future<Output = Result<Option<HolderInfo>>> + Send>>;

/// Polls the election's holder every `retry_period` and reports changes.
///
/// Made by [`LeaderElector::observe`](crate::LeaderElector::observe). Polling
/// (rather than each backend's watch) keeps it the same on every source;
/// a change shows up at most one retry period plus one round trip late. A
/// new term of the same identity is a change too: its token differs.
///
/// Also a [`futures_core::Stream`] that never ends.
pub struct Observer {
    source: Arc<dyn FencingSource>,
    election: ResourceName,
    period: Duration,
    /// Each query gives up after this long (with [`fencing_core::Error::Timeout`]).
    query_timeout: Duration,
    /// What was last reported; `None` before the first report.
    reported: Option<Option<Leader>>,
    /// The query in flight. Kept across calls, so a cancelled `changed()` loses
    /// nothing: the next call resumes it.
    query: Option<Query>,
    /// When the next query may start; `None` before the first.
    pause: Option<Pin<Box<Sleep>>>,
}

impl Observer {
    pub(crate) fn new(
        source: Arc<dyn FencingSource>,
        election: ResourceName,
        period: Duration,
        query_timeout: Duration,
    ) -> Self {
        Observer {
            source,
            election,
            period,
            query_timeout,
            reported: None,
            query: None,
            pause: None,
        }
    }

    /// The first call returns the current leader (`None`: no leader); later
    /// calls wait for the next change (another identity or another token).
    /// Errors of the source are returned; calling again retries one retry
    /// period later.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future loses no change: the next call reports it.
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        std::future::poll_fn(|cx| self.poll_change(cx)).await
    }

    fn start_query(&mut self) -> Query {
        let (source, election) = (self.source.clone(), self.election.clone());
        let limit = self.query_timeout;
        Box::pin(async move {
            let operation = || format!("ask for the leader of election {election:?}");
            with_timeout(Some(limit), operation, source.holder(&election)).await
        })
    }

    fn poll_change(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Leader>>> {
        loop {
            if let Some(query) = self.query.as_mut() {
                let answer = ready!(query.as_mut().poll(cx));
                self.query = None;
                let next = Instant::now() + self.period;
                match self.pause.as_mut() {
                    Some(p) => p.as_mut().reset(next),
                    None => self.pause = Some(Box::pin(tokio::time::sleep_until(next))),
                }
                let leader = answer?.map(Leader::from);
                if self.reported.as_ref() != Some(&leader) {
                    self.reported = Some(leader.clone());
                    return Poll::Ready(Ok(leader));
                }
            } else {
                if let Some(p) = self.pause.as_mut() {
                    ready!(p.as_mut().poll(cx));
                }
                self.query = Some(self.start_query());
            }
        }
    }
}

impl futures_core::Stream for Observer {
    type Item = Result<Option<Leader>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Every field is Unpin (the futures are boxed), so is Observer.
        self.get_mut().poll_change(cx).map(Some)
    }
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.election)
            .field("period", &self.period)
            .field("reported", &self.reported)
            .finish_non_exhaustive()
    }
}
