//! Fencing for HTTP services that *are* the storage.
//!
//! A key-value store, a blob service or any HTTP API that applies writes
//! itself keeps the high-water marks of its resources in a
//! [`Gate`](fencing_core::Gate) and wraps its handlers in a
//! [`FencingLayer`]. Clients send the token of their grant in the
//! `Fencing-Token` header and the source that minted it in
//! `Fencing-Source` ([`FencedRequest::fencing_grant`] sets both); a write
//! with a token lower than the highest the store accepted for that
//! resource, or a token of another source than the one that set the mark,
//! is refused with `409 Conflict` before it reaches the handler, and the
//! client turns that answer back into the gate's error
//! ([`Error::Stale`](fencing_core::Error::Stale),
//! [`Error::ForeignSource`](fencing_core::Error::ForeignSource), ...) with
//! [`refusal_from_response`].
//!
//! The layer is plain tower (no axum dependency), so it fits axum, hyper or
//! any tower-based server. Admit and write act as one step: the layer holds
//! a per-resource async mutex from the admit until the handler's future has
//! finished (see [`FencingLayer`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::sync::Arc;
//! use axum::{body::Body, routing::put, Router};
//! use fencing::{Error, FencingToken, MemoryGate, SourceId};
//! use fencing::http::{refusal_from_response, FencedRequest, FencingLayer};
//! use http::{Request, StatusCode};
//! use http_body_util::BodyExt;
//! use tower::ServiceExt;
//!
//! // Server: every PUT to /kv/{key} needs a current token for its path.
//! let gate = Arc::new(MemoryGate::new()); // a FileGate survives restarts
//! let app = Router::new()
//!     .route("/kv/{key}", put(|body: String| async move { body }))
//!     .layer(FencingLayer::by_path(gate));
//!
//! // Client: attach the token and source of the grant (`.fencing_grant(&grant)`
//! // sets both; here bare values).
//! let write = |token: u64, source: &str| {
//!     Request::put("/kv/a")
//!         .fencing_token(FencingToken::new(token))
//!         .fencing_source(&SourceId::new(source))
//!         .body(Body::from("v"))
//!         .unwrap()
//! };
//! let refusal = |response: http::Response<_>| async move {
//!     let status = response.status();
//!     let body = BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
//!     assert_eq!(status, StatusCode::CONFLICT);
//!     refusal_from_response(status, &body)
//! };
//! let ok = app.clone().oneshot(write(35, "etcd:6b2c")).await.unwrap();
//! assert_eq!(ok.status(), StatusCode::OK);
//!
//! match refusal(app.clone().oneshot(write(34, "etcd:6b2c")).await.unwrap()).await {
//!     Some(Error::Stale { presented, highest }) => {
//!         assert_eq!((presented.get(), highest.get()), (34, 35)); // re-acquire
//!     }
//!     other => panic!("{other:?}"),
//! }
//! // Another source's token is not comparable, however high.
//! match refusal(app.clone().oneshot(write(99, "zk:prod")).await.unwrap()).await {
//!     Some(Error::ForeignSource { expected, .. }) => assert_eq!(expected.as_str(), "etcd:6b2c"),
//!     other => panic!("{other:?}"),
//! }
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
mod body;
mod client;
mod layer;
mod rejection;
mod source;

pub use body::FencingBody;
pub use client::{FencedRequest, FencingGrant, IntoFencingToken};
pub use layer::{ByPath, FencingLayer, FencingService, ResourceExtractor, ResponseFuture};
pub use rejection::{refusal_from_response, stale_from_response, token_from_headers};
pub use source::{source_from_headers, source_header_value, MAX_SOURCE_HEADER_LEN};

/// The request header carrying the fencing token, in canonical decimal.
/// Header names are case-insensitive: `Fencing-Token` on the wire is the
/// same header.
pub const HEADER: &str = "fencing-token";

/// The optional request header naming the source that minted the token
/// (see [`source_header_value`] for its one spelling). With it the layer
/// admits through [`Gate::admit_from`](fencing_core::Gate::admit_from), so
/// a token of another source than the resource's mark is refused; without
/// it through the unbound [`Gate::admit_any_source`](fencing_core::Gate::admit_any_source).
pub const SOURCE_HEADER: &str = "fencing-source";
