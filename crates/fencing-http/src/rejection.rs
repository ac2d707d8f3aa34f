//! Reading the token header, the layer's error responses, and turning a
//! 409 body back into the gate's error.

use bytes::Bytes;
use fencing_core::{Error, FencingToken, ResourceName, SourceId};
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use serde_json::Value;

use crate::body::FencingBody;
use crate::HEADER;

/// The `error` text of a 409 response.
pub(crate) const STALE_MESSAGE: &str = "stale fencing token";
/// The `error` text of a 400 response for a request without the header.
pub(crate) const MISSING_MESSAGE: &str = "missing Fencing-Token header";
/// The `error` text of a 409 response for a token of another source.
pub(crate) const FOREIGN_MESSAGE: &str = "foreign fencing source";
/// The `error` text of a 409 response for a token without a source at a
/// bound mark.
pub(crate) const UNNAMED_MESSAGE: &str = "fencing source required";
/// The `error` text of a 409 response for a token no live grant carries.
pub(crate) const UNKNOWN_MESSAGE: &str = "unknown fencing token";
/// The `error` text of a 503 response.
pub(crate) const UNAVAILABLE_MESSAGE: &str = "fencing gate unavailable";

/// Longest header text echoed back in an error.
const ECHO_LIMIT: usize = 64;

/// Reads the fencing token of a request.
///
/// `Ok(None)` when the request has no `Fencing-Token` header. A value that
/// is not canonical decimal (see [`FencingToken`]'s `FromStr`), is not
/// visible ASCII, or appears in more than one header line is an
/// [`Error::InvalidToken`] whose message names the problem. (HTTP parsers
/// strip whitespace around a field value before it reaches a header map,
/// so `Fencing-Token:  7 ` on the wire reads as `7`.)
///
/// ```
/// use fencing::FencingToken;
/// use http::HeaderMap;
///
/// let mut headers = HeaderMap::new();
/// assert!(fencing::http::token_from_headers(&headers)?.is_none());
/// headers.insert(fencing::http::HEADER, "42".parse().unwrap());
/// assert_eq!(fencing::http::token_from_headers(&headers)?, Some(FencingToken::new(42)));
/// headers.insert(fencing::http::HEADER, "-1".parse().unwrap());
/// assert!(fencing::http::token_from_headers(&headers).is_err());
/// # Ok::<(), fencing::Error>(())
/// ```
pub fn token_from_headers(headers: &HeaderMap) -> Result<Option<FencingToken>, Error> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Error::InvalidToken {
            input: echo(&String::from_utf8_lossy(first.as_bytes())),
            reason: "more than one Fencing-Token header".into(),
        });
    }
    // Bytes outside visible ASCII become U+FFFD, which the canonical parser
    // refuses with its own message, like every other malformed form.
    String::from_utf8_lossy(first.as_bytes())
        .parse::<FencingToken>()
        .map(Some)
}

fn echo(input: &str) -> String {
    match input.char_indices().nth(ECHO_LIMIT) {
        Some((cut, _)) => format!("{}...", &input[..cut]),
        None => input.to_owned(),
    }
}

/// Why the layer refused a request, before or at the gate.
#[derive(Debug)]
pub(crate) enum Rejection {
    /// No `Fencing-Token` header on a gated request.
    MissingToken,
    /// A header that does not hold one canonical token.
    MalformedToken(Error),
    /// The extractor found no resource in the request.
    NoResource,
    /// The extractor's resource is not a valid `ResourceName`, or the gate
    /// refused the name.
    BadResource(Error),
    /// A `Fencing-Source` header that does not hold one canonical id.
    MalformedSource(Error),
    /// The gate refused a token lower than its high-water mark.
    Stale {
        presented: FencingToken,
        highest: FencingToken,
    },
    /// The mark is bound to another source than the request's.
    ForeignSource {
        resource: ResourceName,
        expected: SourceId,
        presented: SourceId,
    },
    /// The mark is bound to a source and the request named none.
    UnnamedSource {
        resource: ResourceName,
        expected: SourceId,
    },
    /// A validating gate found no live grant carrying the token.
    UnknownToken {
        resource: ResourceName,
        token: FencingToken,
    },
    /// The gate could not decide (I/O, backend, corrupt state).
    GateUnavailable,
}

impl Rejection {
    /// Sorts an error returned by [`Gate::admit_with`](fencing_core::Gate::admit_with)
    /// or [`Gate::admit_from`](fencing_core::Gate::admit_from) for `resource`.
    pub(crate) fn from_gate(error: Error, resource: &ResourceName) -> Self {
        let resource = resource.clone();
        match error {
            Error::Stale { presented, highest } => Rejection::Stale { presented, highest },
            Error::ForeignSource {
                expected,
                presented,
            } => Rejection::ForeignSource {
                resource,
                expected,
                presented,
            },
            Error::UnnamedSource { expected, .. } => {
                Rejection::UnnamedSource { resource, expected }
            }
            Error::UnknownToken { token, .. } => Rejection::UnknownToken { resource, token },
            e @ (Error::InvalidResource { .. } | Error::InvalidToken { .. }) => {
                Rejection::BadResource(e)
            }
            other => {
                tracing::warn!(error = %other, "fencing gate failed; answering 503");
                Rejection::GateUnavailable
            }
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Rejection::MissingToken
            | Rejection::MalformedToken(_)
            | Rejection::NoResource
            | Rejection::MalformedSource(_)
            | Rejection::BadResource(_) => StatusCode::BAD_REQUEST,
            Rejection::Stale { .. }
            | Rejection::ForeignSource { .. }
            | Rejection::UnnamedSource { .. }
            | Rejection::UnknownToken { .. } => StatusCode::CONFLICT,
            Rejection::GateUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The JSON body, keys in a fixed order: `error` first, then for a
    /// stale token `presented` and `highest` as JSON numbers; for the other
    /// 409 answers `resource` and what refused the request.
    pub(crate) fn body(&self) -> String {
        let text = |s: &dyn std::fmt::Display| Value::String(s.to_string());
        let message = match self {
            Rejection::Stale { presented, highest } => {
                return format!(
                    r#"{{"error":"{STALE_MESSAGE}","presented":{},"highest":{}}}"#,
                    presented.get(),
                    highest.get()
                );
            }
            Rejection::ForeignSource {
                resource,
                expected,
                presented,
            } => {
                return format!(
                    r#"{{"error":"{FOREIGN_MESSAGE}","resource":{},"expected":{},"presented":{}}}"#,
                    text(resource),
                    text(expected),
                    text(presented)
                );
            }
            Rejection::UnnamedSource { resource, expected } => {
                return format!(
                    r#"{{"error":"{UNNAMED_MESSAGE}","resource":{},"expected":{}}}"#,
                    text(resource),
                    text(expected)
                );
            }
            Rejection::UnknownToken { resource, token } => {
                return format!(
                    r#"{{"error":"{UNKNOWN_MESSAGE}","resource":{},"token":{}}}"#,
                    text(resource),
                    token.get()
                );
            }
            Rejection::MissingToken => MISSING_MESSAGE.to_owned(),
            Rejection::MalformedToken(e)
            | Rejection::MalformedSource(e)
            | Rejection::BadResource(e) => e.to_string(),
            Rejection::NoResource => "the request names no fenced resource".to_owned(),
            Rejection::GateUnavailable => UNAVAILABLE_MESSAGE.to_owned(),
        };
        format!(r#"{{"error":{}}}"#, Value::String(message))
    }

    pub(crate) fn into_response<B>(self) -> Response<FencingBody<B>> {
        let body = Bytes::from(self.body());
        let mut response = Response::new(FencingBody::rejection(body));
        *response.status_mut() = self.status();
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// Turns the body of a 409 answer from a [`FencingLayer`](crate::FencingLayer)
/// back into [`Error::Stale`], so a client can handle the refusal like any
/// other gate's (`needs_reacquire()` is true: re-acquire, re-read, redo).
///
/// `None` for any other status or a body that is not the layer's stale
/// answer.
///
/// ```
/// use fencing::{Error, FencingToken, ResourceName};
/// use http::StatusCode;
///
/// let body = br#"{"error":"stale fencing token","presented":3,"highest":5}"#;
/// match fencing::http::stale_from_response(StatusCode::CONFLICT, body) {
///     Some(Error::Stale { presented, highest }) => {
///         assert_eq!((presented, highest), (FencingToken::new(3), FencingToken::new(5)));
///     }
///     other => panic!("{other:?}"),
/// }
/// assert!(fencing::http::stale_from_response(StatusCode::OK, body).is_none());
/// ```
#[must_use]
pub fn stale_from_response(status: StatusCode, body: &[u8]) -> Option<Error> {
    refusal_from_response(status, body).filter(|e| matches!(e, Error::Stale { .. }))
}

/// Turns the body of a 409 answer from a [`FencingLayer`](crate::FencingLayer)
/// back into the gate's error: [`Error::Stale`], [`Error::ForeignSource`],
/// [`Error::UnnamedSource`] or [`Error::UnknownToken`]. Stale and unknown
/// tokens are answered by re-acquiring
/// ([`Error::needs_reacquire`]); the source errors by fixing how the
/// client names its source or which store it writes to.
///
/// `None` for any other status or a body that is not one of the layer's
/// 409 answers.
///
/// ```
/// use fencing::Error;
/// use http::StatusCode;
///
/// let body = br#"{"error":"foreign fencing source","resource":"/kv/a","expected":"etcd:6b2c","presented":"zk:prod"}"#;
/// match fencing::http::refusal_from_response(StatusCode::CONFLICT, body) {
///     Some(Error::ForeignSource { expected, presented }) => {
///         assert_eq!((expected.as_str(), presented.as_str()), ("etcd:6b2c", "zk:prod"));
///     }
///     other => panic!("{other:?}"),
/// }
/// ```
#[must_use]
pub fn refusal_from_response(status: StatusCode, body: &[u8]) -> Option<Error> {
    if status != StatusCode::CONFLICT {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    let text = |key: &str| value.get(key)?.as_str().map(str::to_owned);
    let number = |key: &str| value.get(key)?.as_u64().map(FencingToken::new);
    Some(match value.get("error")?.as_str()? {
        STALE_MESSAGE => Error::Stale {
            presented: number("presented")?,
            highest: number("highest")?,
        },
        FOREIGN_MESSAGE => Error::ForeignSource {
            expected: SourceId::new(text("expected")?),
            presented: SourceId::new(text("presented")?),
        },
        UNNAMED_MESSAGE => Error::UnnamedSource {
            resource: ResourceName::nonportable(text("resource")?).ok()?,
            expected: SourceId::new(text("expected")?),
        },
        UNKNOWN_MESSAGE => Error::UnknownToken {
            resource: ResourceName::nonportable(text("resource")?).ok()?,
            token: number("token")?,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append("Fencing-Token", HeaderValue::from_bytes(v).unwrap());
        }
        map
    }

    #[test]
    fn parses_one_canonical_token_under_any_header_case() {
        let mut map = HeaderMap::new();
        map.insert("FENCING-TOKEN", HeaderValue::from_static("7"));
        assert_eq!(
            token_from_headers(&map).unwrap(),
            Some(FencingToken::new(7))
        );
        assert_eq!(
            token_from_headers(&headers(&[b"18446744073709551615"])).unwrap(),
            Some(FencingToken::new(u64::MAX))
        );
        assert_eq!(token_from_headers(&headers(&[])).unwrap(), None);
    }

    #[test]
    fn refuses_every_malformed_value_with_the_core_reason() {
        for (bad, reason) in [
            (&b""[..], "empty"),
            (b"-1", "not a decimal number"),
            (b" 7", "not a decimal number"),
            (b"abc", "not a decimal number"),
            (b"07", "leading zero"),
            (b"18446744073709551616", "above the 64-bit range"),
            (b"184467440737095516160", "too long"),
            (b"7, 8", "not a decimal number"),
            (b"\xff7", "not a decimal number"),
        ] {
            match token_from_headers(&headers(&[bad])) {
                Err(e @ Error::InvalidToken { .. }) => {
                    assert!(e.to_string().contains(reason), "{bad:?}: {e}");
                }
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn refuses_two_header_lines_even_if_equal() {
        let err = token_from_headers(&headers(&[b"7", b"7"])).unwrap_err();
        assert!(err.to_string().contains("more than one"), "{err}");
    }

    fn error_of(r: &Rejection) -> String {
        let v: Value = serde_json::from_str(&r.body()).unwrap();
        v["error"].as_str().unwrap().to_owned()
    }

    #[test]
    fn stale_body_carries_both_numbers_as_json_numbers() {
        let r = Rejection::Stale {
            presented: FencingToken::new(3),
            highest: FencingToken::new(u64::MAX),
        };
        assert_eq!(r.status(), StatusCode::CONFLICT);
        let text = r.body();
        assert_eq!(
            text,
            r#"{"error":"stale fencing token","presented":3,"highest":18446744073709551615}"#
        );
        match stale_from_response(StatusCode::CONFLICT, text.as_bytes()) {
            Some(Error::Stale { presented, highest }) => {
                assert_eq!(presented.get(), 3);
                assert_eq!(highest.get(), u64::MAX);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_bodies_have_status_and_message() {
        let missing = Rejection::MissingToken;
        assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            missing.body(),
            r#"{"error":"missing Fencing-Token header"}"#
        );
        let malformed = Rejection::MalformedToken("abc".parse::<FencingToken>().unwrap_err());
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
        let msg = error_of(&malformed);
        assert!(
            msg.contains("\"abc\"") && msg.contains("not a decimal"),
            "{msg}"
        );
        let bad = Rejection::BadResource(fencing_core::ResourceName::new("").unwrap_err());
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        assert!(error_of(&bad).contains("empty"));
        let io = Rejection::from_gate(
            Error::Config("secret path".into()),
            &fencing_core::ResourceName::new("r").unwrap(),
        );
        assert_eq!(io.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(io.body(), r#"{"error":"fencing gate unavailable"}"#);
        let quoted = Rejection::MalformedToken("\"}{".parse::<FencingToken>().unwrap_err());
        assert!(error_of(&quoted).contains("\"}{"));
    }

    #[test]
    fn every_conflict_body_turns_back_into_its_error() {
        let r = ResourceName::nonportable("/kv/\"a\"").unwrap();
        for error in [
            Error::Stale {
                presented: FencingToken::new(3),
                highest: FencingToken::new(5),
            },
            Error::ForeignSource {
                expected: SourceId::new("etcd:a"),
                presented: SourceId::new("zk:\"b\""),
            },
            Error::UnnamedSource {
                resource: r.clone(),
                expected: SourceId::new("etcd:a"),
            },
            Error::UnknownToken {
                resource: r.clone(),
                token: FencingToken::new(u64::MAX),
            },
        ] {
            let shown = error.to_string();
            let rejection = Rejection::from_gate(error, &r);
            assert_eq!(rejection.status(), StatusCode::CONFLICT);
            let back = refusal_from_response(StatusCode::CONFLICT, rejection.body().as_bytes())
                .unwrap_or_else(|| panic!("{}", rejection.body()));
            assert_eq!(back.to_string(), shown);
        }
        let stale = br#"{"error":"unknown fencing token","resource":"r","token":3}"#;
        assert!(stale_from_response(StatusCode::CONFLICT, stale).is_none());
    }

    #[test]
    fn responses_are_json() {
        let resp = Rejection::MissingToken.into_response::<()>();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");
    }

    #[test]
    fn stale_from_response_ignores_everything_else() {
        let ok = br#"{"error":"stale fencing token","presented":3,"highest":5}"#;
        assert!(stale_from_response(StatusCode::CONFLICT, ok).is_some());
        for (status, body) in [
            (StatusCode::OK, &ok[..]),
            (StatusCode::BAD_REQUEST, &ok[..]),
            (StatusCode::CONFLICT, b"not json"),
            (StatusCode::CONFLICT, b""),
            (
                StatusCode::CONFLICT,
                br#"{"error":"other","presented":3,"highest":5}"#,
            ),
            (
                StatusCode::CONFLICT,
                br#"{"error":"stale fencing token","presented":-3,"highest":5}"#,
            ),
            (
                StatusCode::CONFLICT,
                br#"{"error":"stale fencing token","presented":"3","highest":5}"#,
            ),
            (
                StatusCode::CONFLICT,
                br#"{"error":"stale fencing token","presented":3}"#,
            ),
            (StatusCode::CONFLICT, br#"[1,2]"#),
        ] {
            assert!(
                stale_from_response(status, body).is_none(),
                "{status} {body:?}"
            );
        }
    }
}
