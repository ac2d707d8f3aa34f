//! The Kubernetes backend of `fencing`: [`KubeLeaseSource`] grants locks
//! on `coordination.k8s.io/v1` Lease objects, following client-go's
//! `leaderelection` rules so Go and Rust candidates share a Lease.
//!
//! - **Fields** as client-go writes them: `holderIdentity`,
//!   `leaseDurationSeconds`, `acquireTime`, `renewTime`, `leaseTransitions`.
//! - **Acquire**: create the Lease if absent; else, if it is free (empty
//!   holder) or expired, replace it with its resourceVersion as the
//!   precondition. A 409 means someone else won. Expiry is judged on the
//!   local monotonic clock: a Lease is expired once
//!   `leaseDurationSeconds` have passed since *we* last saw its
//!   resourceVersion change; other machines' wall clocks are never read.
//! - **Token**: the resourceVersion returned by the write that made the
//!   grant, parsed as a `u64` (etcd's revision; a non-numeric version is an
//!   [`Error::InvalidToken`](fencing_core::Error::InvalidToken)). Renewals
//!   change the resourceVersion but not the token. Tokens are comparable
//!   only within one Lease of one cluster.
//! - **Renew** every retry period; the grant is lost when the Lease stops
//!   naming it, or locally once the renew deadline has passed since the
//!   last confirmed renewal was sent.
//! - **Release** like client-go's `ReleaseOnCancel`: empty holder, one
//!   second duration.
//!
//! Deviations from client-go, each for fencing:
//! - `leaseTransitions` grows with every grant, not only when the holder
//!   changes, so two grants of one identity are told apart by `validate`;
//! - a Lease that names our own identity is not taken over before it
//!   expires (a restarted process with a fixed identity waits a lease
//!   duration), since the old incarnation may still be running;
//! - our holders record their token in the annotation
//!   [`TOKEN_ANNOTATION`] (`RV;TRANSITIONS;HOLDER`) with each renewal, so
//!   `holder()` can report it; client-go ignores and keeps the annotation,
//!   and a stale value (not matching the current holder and transitions)
//!   is ignored. For a client-go holder `holder()` reports the Lease's
//!   current resourceVersion, a version written during its tenure.
//!
//! **Coordinated leader election** (KEP-4355): a Lease whose `strategy` is
//! set belongs to kube-apiserver's election controller; a plain acquire
//! refuses it ([`Error::ManagedElsewhere`](fencing_core::Error::ManagedElsewhere)),
//! and a source made with [`LeaseOptions::coordinated`] joins that
//! election as a `LeaseCandidate` instead.
//!
//! RBAC needed in the namespace: `get`, `create` and `update` on
//! `leases.coordination.k8s.io` (see `deploy/kubernetes/rbac.yaml`).
//!
//! This crate enables no k8s-openapi version feature; the application
//! picks one (`k8s-openapi = { version = "0.29", features = ["v1_35"] }`).
//!
//! ```no_run
//! # async fn demo() -> fencing::Result<()> {
//! use fencing::{AcquireOptions, FencingSource, ResourceName};
//! use fencing::kube::KubeLeaseSource;
//!
//! let source = KubeLeaseSource::from_url("kube://team-a?kubeconfig=/etc/kube/app.conf&ttl=15").await?;
//! let grant = source.acquire(&ResourceName::new("ledger-writer")?, &AcquireOptions::new()).await?;
//! // carry grant.token() on every protected write; watch grant.lost()
//! grant.release().await?;
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
mod candidate;
mod client;
mod config;
mod error;
mod names;
mod record;
mod session;
mod source;

pub use candidate::{Candidacy, OLDEST_EMULATION_VERSION};
pub use config::{KubeLeaseConfig, LeaseOptions, DEFAULT_REQUEST_TIMEOUT};
pub use record::{RENEW_TIME_AHEAD_MAX, TOKEN_ANNOTATION};
pub use source::KubeLeaseSource;

/// The client crate, for callers of [`KubeLeaseSource::from_client`].
pub use kube;
