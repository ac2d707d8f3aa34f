//! What the benchmark binaries share: their `main`, the bound on one
//! request, the median, and reading the JSON event lines of an anchor
//! program (Go or Java) they drive.

pub mod plot;

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncBufRead, Lines};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long one request of a benchmark may take (every side alike).
pub const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// `fut` within [`OP_TIMEOUT`], or an error naming `what`.
pub async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> Result<T, BoxError> {
    tokio::time::timeout(OP_TIMEOUT, fut)
        .await
        .map_err(|_| format!("{what} took longer than {OP_TIMEOUT:?}").into())
}

/// Runs `run` on a multi-threaded runtime; an error is printed after the
/// program's name and gives exit status 1. SIGINT or SIGTERM (`timeout`,
/// Ctrl-C) drops `run` first, so the clusters and servers it started are
/// stopped and their temporary directories removed as on any other exit.
pub fn main_with<F>(name: &str, run: F) -> ExitCode
where
    F: Future<Output = Result<(), BoxError>>,
{
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BoxError::from)
        .and_then(|rt| {
            rt.block_on(async {
                tokio::select! {
                    result = run => result,
                    signal = stop_signal() => Err(format!("stopped by {signal}").into()),
                }
            })
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The name of the first SIGINT or SIGTERM to arrive; never, if neither
/// can be listened for.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        },
        _ => std::future::pending().await,
    }
}

/// The median; with an even count, the mean of the middle two.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// Min, median and max of a benchmark's runs (at least one).
pub fn min_median_max(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let (min, max) = (v[0], v[v.len() - 1]);
    (min, median(v), max)
}

/// The next line of `program`'s output, which must be the JSON event `want`
/// and come within `limit`.
pub async fn next_event<R: AsyncBufRead + Unpin>(
    lines: &mut Lines<R>,
    program: &str,
    want: &str,
    limit: Duration,
) -> Result<serde_json::Value, BoxError> {
    let line = tokio::time::timeout(limit, lines.next_line())
        .await
        .map_err(|_| format!("{program}: no {want:?} event within {limit:?}"))??
        .ok_or_else(|| format!("{program} ended early"))?;
    let event: serde_json::Value = serde_json::from_str(&line)?;
    if event["event"] != want {
        return Err(format!("{program}: expected {want:?}, got {line}").into());
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::min_median_max;

    #[test]
    fn min_median_max_of_unsorted_runs() {
        assert_eq!(min_median_max(vec![3.0, 1.0, 2.0]), (1.0, 2.0, 3.0));
        assert_eq!(min_median_max(vec![4.0, 1.0, 2.0, 9.0]), (1.0, 3.0, 9.0));
        assert_eq!(min_median_max(vec![5.0]), (5.0, 5.0, 5.0));
    }
}
