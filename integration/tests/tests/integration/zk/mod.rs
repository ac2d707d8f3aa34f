//! ZooKeeper 3.8 and 3.9 ensembles on loopback.

mod conformance;
mod faults;
mod harness_self_test;
mod identity;
mod interop;
mod partitions;
mod security;
