//! Fencing for HTTP services that *are* the storage.
//!
//! A key-value store, a blob service or any HTTP API that applies writes
//! itself keeps the high-water marks of its resources in a
//! [`Gate`](fencing_core::Gate) and wraps its handlers in a
//! [`FencingLayer`]. Clients send the token of their grant in the
//! `Fencing-Token` header; a write with a token lower than the highest the
//! store accepted for that resource is refused with `409 Conflict` before it
//! reaches the handler, and the client turns that answer back into
//! [`Error::Stale`](fencing_core::Error::Stale) with
//! [`stale_from_response`] and re-acquires.
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
//! use fencing_core::{Error, FencingToken, MemoryGate};
//! use fencing_http::{stale_from_response, FencedRequest, FencingLayer};
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
//! // Client: attach the token of the grant (here a bare token).
//! let write = |token: u64| {
//!     Request::put("/kv/a")
//!         .fencing_token(FencingToken::new(token))
//!         .body(Body::from("v"))
//!         .unwrap()
//! };
//! let ok = app.clone().oneshot(write(35)).await.unwrap();
//! assert_eq!(ok.status(), StatusCode::OK);
//!
//! let refused = app.clone().oneshot(write(34)).await.unwrap();
//! let status = refused.status();
//! let body = refused.into_body().collect().await.unwrap().to_bytes();
//! assert_eq!(status, StatusCode::CONFLICT);
//! match stale_from_response(status, &body) {
//!     Some(Error::Stale { presented, highest }) => {
//!         assert_eq!((presented.get(), highest.get()), (34, 35)); // re-acquire
//!     }
//!     other => panic!("{other:?}"),
//! }
//! # }
//! ```

#![warn(missing_docs)]

mod body;
mod client;
mod layer;
mod rejection;

pub use body::FencingBody;
pub use client::{FencedRequest, IntoFencingToken};
pub use layer::{ByPath, FencingLayer, FencingService, ResourceExtractor, ResponseFuture};
pub use rejection::{stale_from_response, token_from_headers};

/// The request header carrying the fencing token, in canonical decimal.
/// Header names are case-insensitive: `Fencing-Token` on the wire is the
/// same header.
pub const HEADER: &str = "fencing-token";
