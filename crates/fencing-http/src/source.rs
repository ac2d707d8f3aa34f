//! The `Fencing-Source` header: a source id in one canonical text form.
//!
//! Source ids are any UTF-8 (an ensemble name, a Kubernetes cluster URL),
//! header values are visible ASCII. Every byte outside `!`..`~`, and `%`
//! itself, is written as `%XX` with uppercase hex; nothing else is. The
//! reader accepts exactly that form, so each id has one spelling and a
//! value that two parsers could read differently is refused.

use fencing_core::{Error, SourceId};
use http::header::{HeaderMap, HeaderValue};

use crate::SOURCE_HEADER;

/// Longest `Fencing-Source` value accepted, in bytes as sent.
pub const MAX_SOURCE_HEADER_LEN: usize = 1024;

/// Bytes sent as they are; every other byte is escaped.
fn is_plain(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && b != b'%'
}

/// The header value for `source`, in the canonical form.
///
/// ```
/// use fencing::SourceId;
///
/// let v = fencing::http::source_header_value(&SourceId::new("zk:prod eu/1"));
/// assert_eq!(v, "zk:prod%20eu/1");
/// ```
#[must_use]
pub fn source_header_value(source: &SourceId) -> HeaderValue {
    let mut text = String::with_capacity(source.as_str().len());
    for &b in source.as_str().as_bytes() {
        if is_plain(b) {
            text.push(char::from(b));
        } else {
            text.push_str(&format!("%{b:02X}"));
        }
    }
    HeaderValue::from_str(&text).expect("visible ASCII is a valid header value")
}

/// Reads the source id of a request.
///
/// `Ok(None)` when the request has no `Fencing-Source` header. A value
/// that is empty, longer than [`MAX_SOURCE_HEADER_LEN`], not in the
/// canonical form of [`source_header_value`], not UTF-8 once decoded, or
/// that appears in more than one header line is an [`Error::InvalidSource`]
/// naming the problem.
///
/// ```
/// use fencing::SourceId;
/// use http::HeaderMap;
///
/// let mut headers = HeaderMap::new();
/// assert!(fencing::http::source_from_headers(&headers)?.is_none());
/// headers.insert(fencing::http::SOURCE_HEADER, "etcd:6b2c%C3%A9".parse().unwrap());
/// assert_eq!(fencing::http::source_from_headers(&headers)?, Some(SourceId::new("etcd:6b2cé")));
/// headers.insert(fencing::http::SOURCE_HEADER, "etcd%3a6b2c".parse().unwrap());
/// assert!(fencing::http::source_from_headers(&headers).is_err()); // ':' needs no escape
/// # Ok::<(), fencing::Error>(())
/// ```
pub fn source_from_headers(headers: &HeaderMap) -> Result<Option<SourceId>, Error> {
    let mut values = headers.get_all(SOURCE_HEADER).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    let shown = String::from_utf8_lossy(first.as_bytes());
    if values.next().is_some() {
        return Err(Error::invalid_source(
            shown,
            "more than one Fencing-Source header",
        ));
    }
    decode(first.as_bytes())
        .map(|id| Some(SourceId::new(id)))
        .map_err(|reason| Error::invalid_source(shown, reason))
}

fn decode(raw: &[u8]) -> Result<String, &'static str> {
    if raw.is_empty() {
        return Err("empty");
    }
    if raw.len() > MAX_SOURCE_HEADER_LEN {
        return Err("longer than 1024 bytes");
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if is_plain(b) {
            out.push(b);
            i += 1;
            continue;
        }
        if b != b'%' {
            return Err("a byte outside visible ASCII that is not %-escaped");
        }
        let byte = match (raw.get(i + 1).and_then(hex), raw.get(i + 2).and_then(hex)) {
            (Some(h), Some(l)) => h << 4 | l,
            _ => return Err("'%' not followed by two uppercase hex digits"),
        };
        if is_plain(byte) {
            return Err("an escaped byte that must be sent as it is (not canonical)");
        }
        out.push(byte);
        i += 3;
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once decoded")
}

fn hex(b: &u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append("Fencing-Source", HeaderValue::from_bytes(v).unwrap());
        }
        map
    }

    #[test]
    fn refuses_every_non_canonical_value_with_a_reason() {
        let long = "a".repeat(MAX_SOURCE_HEADER_LEN + 1);
        for (bad, reason) in [
            (&b""[..], "empty"),
            (b"a b", "not %-escaped"),
            (b"a\xc3\xa9", "not %-escaped"),
            (b"%", "two uppercase hex"),
            (b"%4", "two uppercase hex"),
            (b"%c3%a9", "two uppercase hex"),
            (b"%41", "not canonical"),
            (b"%25%FF", "not UTF-8"),
            (long.as_bytes(), "longer than"),
        ] {
            match source_from_headers(&headers(&[bad])) {
                Err(e @ Error::InvalidSource { .. }) => {
                    assert!(e.to_string().contains(reason), "{bad:?}: {e}");
                }
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        let twice = source_from_headers(&headers(&[b"a", b"a"])).unwrap_err();
        assert!(twice.to_string().contains("more than one"), "{twice}");
    }

    #[test]
    fn reads_plain_and_escaped_ids() {
        assert_eq!(source_from_headers(&HeaderMap::new()).unwrap(), None);
        for (raw, id) in [
            ("etcd:00ab", "etcd:00ab"),
            (
                "kube:https://10.0.0.1:6443/team-a",
                "kube:https://10.0.0.1:6443/team-a",
            ),
            ("zk:a%20b%25", "zk:a b%"),
        ] {
            assert_eq!(
                source_from_headers(&headers(&[raw.as_bytes()])).unwrap(),
                Some(SourceId::new(id))
            );
        }
    }

    proptest! {
        #[test]
        fn every_id_round_trips_through_its_one_spelling(id in "\\PC{1,40}") {
            let source = SourceId::new(id);
            let mut map = HeaderMap::new();
            map.insert(SOURCE_HEADER, source_header_value(&source));
            prop_assert_eq!(source_from_headers(&map).unwrap(), Some(source));
        }

        #[test]
        fn the_reader_never_panics_and_accepts_only_canonical(raw in proptest::collection::vec(0x20u8..0x7f, 0..64)) {
            if let Ok(id) = decode(&raw) {
                let value = source_header_value(&SourceId::new(id));
                prop_assert_eq!(value.as_bytes(), &raw[..]);
            }
        }
    }
}
