//! Small parsers the backends' URL forms share.

use std::time::Duration;

/// A positive, finite number of seconds below 10^9 (`"2.5"`, `"15"`).
#[must_use]
pub fn positive_seconds(text: &str) -> Option<Duration> {
    let secs: f64 = text.parse().ok()?;
    (secs.is_finite() && secs > 0.0 && secs < 1e9).then(|| Duration::from_secs_f64(secs))
}

/// True for `host:port` with a non-empty host (no `/`) and a port 1..=65535.
#[must_use]
pub fn is_host_port(text: &str) -> bool {
    match text.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_endpoints() {
        assert_eq!(positive_seconds("2.5"), Some(Duration::from_millis(2500)));
        for bad in ["", "0", "-1", "nan", "inf", "1e10", "x"] {
            assert_eq!(positive_seconds(bad), None, "{bad:?}");
        }
        assert!(is_host_port("127.0.0.1:2379") && is_host_port("[::1]:2181"));
        for bad in ["", "a", ":1", "a:0", "a:99999", "a/b:1"] {
            assert!(!is_host_port(bad), "{bad:?}");
        }
    }
}
