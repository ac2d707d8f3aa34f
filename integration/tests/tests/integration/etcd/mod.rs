//! etcd 3.4 and 3.6 clusters on loopback.

mod conformance;
mod faults;
mod harness_self_test;
mod interop;
mod many_locks;
mod partitions;
mod security;
