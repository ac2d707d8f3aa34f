//! The anchors' own bugs, reproduced (issue 57, part 4; docs/anchor-bugs.md).
//!
//! Each test drives an anchor program (etcd's Go `concurrency` package,
//! client-go's leader election) through a known upstream bug with a fault
//! the test controls (a TCP proxy that drops replies, blackholes or cuts
//! connections; a compaction at a chosen step), asserts that the anchor shows
//! the bug, then puts our crate through the same fault and asserts that it
//! does not. Not part of `cargo test --workspace` (`test = false`); run with
//! `scripts/anchor-bugs.sh`, or
//! `cargo test --profile ci -p fencing-integration-tests --test anchor_bugs`.

mod anchor_bugs {
    pub mod driver;
    mod etcd;
    mod kube;
    mod zk;
}
