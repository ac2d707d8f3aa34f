//! Client side: attach the token to outgoing requests.

use fencing_core::{FencingToken, Grant};
use http::header::{HeaderName, HeaderValue};
use http::request::Builder;
use http::Request;

use crate::HEADER;

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

/// Attaches the `Fencing-Token` header to an [`http::Request`] or an
/// [`http::request::Builder`].
///
/// The header is set, not appended: calling it twice leaves the last token
/// (a gate refuses a request with two token headers).
///
/// ```
/// use fencing_core::FencingToken;
/// use fencing_http::FencedRequest;
///
/// let request = http::Request::put("http://127.0.0.1:8080/kv/a")
///     .fencing_token(FencingToken::new(42)) // or `&grant`
///     .body(String::from("value"))
///     .unwrap();
/// assert_eq!(request.headers()["fencing-token"], "42");
/// ```
pub trait FencedRequest: Sized {
    /// Sets the `Fencing-Token` header to `token` in canonical decimal.
    #[must_use]
    fn fencing_token(self, token: impl IntoFencingToken) -> Self;
}

fn header_value(token: impl IntoFencingToken) -> HeaderValue {
    HeaderValue::from(token.into_fencing_token().get())
}

impl FencedRequest for Builder {
    fn fencing_token(mut self, token: impl IntoFencingToken) -> Self {
        let value = header_value(token);
        // `None` only when the builder already holds an error, which
        // `body()` will report.
        if let Some(headers) = self.headers_mut() {
            headers.insert(HeaderName::from_static(HEADER), value);
        }
        self
    }
}

impl<B> FencedRequest for Request<B> {
    fn fencing_token(mut self, token: impl IntoFencingToken) -> Self {
        let value = header_value(token);
        self.headers_mut()
            .insert(HeaderName::from_static(HEADER), value);
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

    #[test]
    fn an_errored_builder_stays_errored() {
        let result = Request::builder()
            .uri("not a uri \0")
            .fencing_token(FencingToken::new(3))
            .body(());
        assert!(result.is_err());
    }
}
