//! The partition tools: network namespaces joined by a bridge, whose links
//! are cut with iptables ([`netns`]), and a TCP proxy that can drop, hold or
//! cut a client's traffic ([`proxy`]).

pub mod netns;
pub mod proxy;
