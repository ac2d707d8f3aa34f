//! The signals `fence run` acts on, caught from before it connects until it
//! exits, so none is lost between two waits.
//!
//! A tokio signal stream only sees signals that arrive while it exists, and
//! once tokio has installed its handler the default action (terminate) is
//! gone for good: a SIGTERM that arrives while no stream exists is
//! swallowed. One set of streams for the whole run closes that gap.

use std::future::Future;
use std::task::{Context, Waker};

use rustix::process::{getpid, kill_process, Signal};
use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

use crate::failure::{Failure, Result};

/// A signal that asks something of `fence`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// SIGINT or SIGTERM: stop the command, release, exit 128+N.
    Stop(Signal),
    /// SIGTSTP (Ctrl-Z): stop the command and `fence` until SIGCONT.
    Suspend,
}

pub struct Signals {
    int: Stream,
    term: Stream,
    tstp: Stream,
}

impl Signals {
    pub fn install() -> Result<Signals> {
        let stream = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::runtime(format!("cannot catch signals: {e}")))
        };
        Ok(Signals {
            int: stream(SignalKind::interrupt())?,
            term: stream(SignalKind::terminate())?,
            tstp: stream(SignalKind::from_raw(Signal::TSTP.as_raw()))?,
        })
    }

    /// The next signal.
    pub async fn recv(&mut self) -> Received {
        tokio::select! {
            Some(()) = self.int.recv() => Received::Stop(Signal::INT),
            Some(()) = self.term.recv() => Received::Stop(Signal::TERM),
            Some(()) = self.tstp.recv() => Received::Suspend,
            // The signal driver is gone only when the runtime shuts down.
            else => std::future::pending().await,
        }
    }

    /// A signal that has arrived and not been handled yet, without waiting;
    /// a stop request wins over a suspend.
    pub fn pending(&mut self) -> Option<Received> {
        let mut cx = Context::from_waker(Waker::noop());
        let ready = |s: &mut Stream, cx: &mut Context<'_>| s.poll_recv(cx).is_ready();
        if ready(&mut self.int, &mut cx) {
            Some(Received::Stop(Signal::INT))
        } else if ready(&mut self.term, &mut cx) {
            Some(Received::Stop(Signal::TERM))
        } else if ready(&mut self.tstp, &mut cx) {
            Some(Received::Suspend)
        } else {
            None
        }
    }

    /// Runs `work` unless a stop signal comes first; Ctrl-Z meanwhile stops
    /// `fence` (there is no command yet) and `work` goes on after SIGCONT.
    pub async fn interruptible<T>(&mut self, work: impl Future<Output = T>) -> Result<T> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                done = &mut work => return Ok(done),
                got = self.recv() => match got {
                    Received::Stop(signal) => return Err(interrupted(signal)),
                    Received::Suspend => stop_self(),
                },
            }
        }
    }
}

/// The failure for a stop signal: the conventional 128+N exit status.
pub fn interrupted(signal: Signal) -> Failure {
    let name = if signal == Signal::INT {
        "SIGINT"
    } else {
        "SIGTERM"
    };
    Failure {
        code: 128u8.wrapping_add(signal.as_raw() as u8),
        message: format!("interrupted by {name}"),
    }
}

/// Stops the whole `fence` process as SIGTSTP's default action would; the
/// call returns once something sent SIGCONT. SIGSTOP, because our SIGTSTP
/// handler cannot be undone for one signal.
pub fn stop_self() {
    if let Err(e) = kill_process(getpid(), Signal::STOP) {
        tracing::warn!(error = %e, "cannot stop for SIGTSTP");
    }
}
