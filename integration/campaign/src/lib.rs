//! The fault campaign, shaped like a Jepsen test: a cluster whose members
//! live in network namespaces ([`fencing_harness::namespaced`]; or a local
//! directory), client processes that lock and write
//! through gates ([`client`]), a seeded nemesis that partitions, pauses and
//! kills ([`nemesis`]), the storage process behind a `FileGate` that the
//! clients write to ([`storage`]) and, optionally, a PostgreSQL server
//! behind a fence column and a fence table ([`pg_storage`]), the controller that records one history
//! ([`run`], [`history`]), the checker that judges it ([`checker`]) and a
//! self-contained HTML time line of the run ([`timeline`]).

pub mod admin;
pub mod checker;
pub mod client;
pub mod client_process;
pub mod coordinated;
pub mod fence_run;
pub mod heal;
pub mod history;
pub mod kube;
pub mod nemesis;
pub mod pg_storage;
pub mod rng;
pub mod run;
pub mod storage;
pub mod timeline;
