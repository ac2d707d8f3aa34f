//! ZooKeeper: a real ensemble on loopback ([`ensemble`]) and the fixture that
//! runs the shared conformance checks against it ([`fixture`]).

pub mod ensemble;
pub mod fixture;
