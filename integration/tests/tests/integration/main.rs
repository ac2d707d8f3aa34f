//! Every integration test of the workspace's real-cluster harness, in one
//! test binary (one link instead of one per file): a module per backend,
//! then the tests that span backends. Tests that measure times under faults
//! are a binary of their own (`tests/timing.rs`), so that they never share
//! the cores with these.
//!
//! Run one backend with a filter, e.g.
//! `cargo test -p fencing-integration-tests --test integration -- etcd::`.

mod etcd;
mod kubernetes;
mod postgres;
mod zk;

mod cluster_gate_sources;
mod cut_off;
mod docker_compose;
mod election;
mod local_crash;
