//! A kube-apiserver on its own etcd.

mod conformance;
mod coordinated;
mod faults;
mod harness_self_test;
mod in_cluster;
mod interop;
mod lease_fields;
mod security;
