//! Client side: attach the token to outgoing requests.

use fencing_core::{FencingToken, Grant, GrantInfo, SourceId};
use http::header::{HeaderName, HeaderValue};
use http::request::Builder;
use http::Request;

use crate::source::source_header_value;
use crate::{HEADER, SOURCE_HEADER};

/// Anything a request can take its fencing token from: a [`FencingToken`]
/// or a [`Grant`] (by reference, the grant stays with its holder).
pub trait IntoFencingToken {
    /// The token to send.
    fn into_fencing_token(self) -> FencingToken;
}

impl IntoFencingToken for FencingToken {
    fn into_fencing_token(self) -> FencingToken {
        self
    }
}

impl IntoFencingToken for &FencingToken {
    fn into_fencing_token(self) -> FencingToken {
        *self
    }
}

impl IntoFencingToken for &Grant {
    fn into_fencing_token(self) -> FencingToken {
        self.token()
    }
}

/// A grant whose token and source a request can carry: a [`Grant`] or the
/// [`GrantInfo`] that [`fenced`](fencing_core::fenced) hands its work.
pub trait FencingGrant {
    /// The token to send.
    fn fencing_token(&self) -> FencingToken;
    /// The source that minted it.
    fn fencing_source(&self) -> &SourceId;
}

impl FencingGrant for Grant {
    fn fencing_token(&self) -> FencingToken {
        self.token()
    }
    fn fencing_source(&self) -> &SourceId {
        self.source()
    }
}

impl FencingGrant for GrantInfo {
    fn fencing_token(&self) -> FencingToken {
        self.token
    }
    fn fencing_source(&self) -> &SourceId {
        &self.source
    }
}

/// Attaches the `Fencing-Token` and `Fencing-Source` headers to an
/// [`http::Request`] or an [`http::request::Builder`].
///
/// Prefer [`fencing_grant`](Self::fencing_grant), which sends both: the
/// store then refuses the token if another source set the resource's mark.
/// Headers are set, not appended: calling a method twice leaves the last
/// value (a gate refuses a request with two token or source headers).
///
/// ```
/// use fencing::{FencingToken, SourceId};
/// use fencing::http::FencedRequest;
///
/// let request = http::Request::put("http://127.0.0.1:8080/kv/a")
///     .fencing_token(FencingToken::new(42)) // or `.fencing_grant(&grant)` for both
///     .fencing_source(&SourceId::new("etcd:6b2c"))
///     .body(String::from("value"))
///     .unwrap();
/// assert_eq!(request.headers()["fencing-token"], "42");
/// assert_eq!(request.headers()["fencing-source"], "etcd:6b2c");
/// ```
pub trait FencedRequest: Sized {
    /// Sets the `Fencing-Token` header to `token` in canonical decimal.
    #[must_use]
    fn fencing_token(self, token: impl IntoFencingToken) -> Self;

    /// Sets the `Fencing-Source` header to `source` in its canonical form
    /// ([`source_header_value`]).
    #[must_use]
    fn fencing_source(self, source: &SourceId) -> Self;

    /// Sets both headers from a grant: the bound form at the gate.
    #[must_use]
    fn fencing_grant(self, grant: &impl FencingGrant) -> Self {
        self.fencing_token(grant.fencing_token())
            .fencing_source(grant.fencing_source())
    }
}

fn header_value(token: impl IntoFencingToken) -> HeaderValue {
    HeaderValue::from(token.into_fencing_token().get())
}

fn set(builder: Builder, name: &'static str, value: HeaderValue) -> Builder {
    let mut builder = builder;
    // `None` only when the builder already holds an error, which `body()`
    // will report.
    if let Some(headers) = builder.headers_mut() {
        headers.insert(HeaderName::from_static(name), value);
    }
    builder
}

impl FencedRequest for Builder {
    fn fencing_token(self, token: impl IntoFencingToken) -> Self {
        set(self, HEADER, header_value(token))
    }

    fn fencing_source(self, source: &SourceId) -> Self {
        set(self, SOURCE_HEADER, source_header_value(source))
    }
}

impl<B> FencedRequest for Request<B> {
    fn fencing_token(mut self, token: impl IntoFencingToken) -> Self {
        let value = header_value(token);
        self.headers_mut()
            .insert(HeaderName::from_static(HEADER), value);
        self
    }

    fn fencing_source(mut self, source: &SourceId) -> Self {
        self.headers_mut().insert(
            HeaderName::from_static(SOURCE_HEADER),
            source_header_value(source),
        );
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token_from_headers;

    #[test]
    fn builder_and_request_carry_one_canonical_header() {
        let max = FencingToken::new(u64::MAX);
        let req = Request::post("/x")
            .fencing_token(FencingToken::new(1))
            .fencing_token(max)
            .body(())
            .unwrap();
        assert_eq!(req.headers().get_all(HEADER).iter().count(), 1);
        assert_eq!(token_from_headers(req.headers()).unwrap(), Some(max));
        let by_ref = |t: &FencingToken| t.into_fencing_token();
        assert_eq!(by_ref(&max), max);
        let req = req.fencing_token(FencingToken::ZERO);
        assert_eq!(req.headers()["Fencing-Token"], "0");
    }

    #[tokio::test]
    async fn fencing_grant_sets_one_token_and_one_source() {
        use fencing_core::{AcquireOptions, FencingSource, LocalSource, ResourceName};
        let dir = tempfile::tempdir().unwrap();
        let source = LocalSource::open(dir.path()).unwrap();
        let r = ResourceName::new("r").unwrap();
        let grant = source.acquire(&r, &AcquireOptions::new()).await.unwrap();
        let mut info = grant.info().clone();
        info.source = SourceId::new("zk:eu west");
        let req = Request::put("/x")
            .fencing_source(&SourceId::new("etcd:old"))
            .fencing_grant(&info)
            .body(())
            .unwrap();
        assert_eq!(req.headers().get_all(SOURCE_HEADER).iter().count(), 1);
        assert_eq!(req.headers()["Fencing-Source"], "zk:eu%20west");
        assert_eq!(
            crate::source_from_headers(req.headers()).unwrap(),
            Some(info.source.clone())
        );
        let req = req.fencing_grant(&grant);
        assert_eq!(
            token_from_headers(req.headers()).unwrap(),
            Some(grant.token())
        );
        assert_eq!(
            crate::source_from_headers(req.headers()).unwrap().as_ref(),
            Some(source.identity())
        );
        grant.release().await.unwrap();
    }

    #[test]
    fn an_errored_builder_stays_errored() {
        let result = Request::builder()
            .uri("not a uri \0")
            .fencing_token(FencingToken::new(3))
            .body(());
        assert!(result.is_err());
    }
}
