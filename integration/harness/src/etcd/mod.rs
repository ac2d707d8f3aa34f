//! etcd: a real N-member cluster on loopback ([`cluster`]) and the fixture
//! that runs the shared conformance checks against it ([`fixture`]).

pub mod cluster;
pub mod fixture;
