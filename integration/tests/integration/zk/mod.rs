//! ZooKeeper 3.8 and 3.9 ensembles on loopback.

mod conformance;
mod faults;
mod follower_partition;
mod harness;
mod interop;
mod security;
