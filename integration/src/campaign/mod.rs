//! The fault campaign: histories recorded while real clusters run under
//! network partitions, process pauses and kills ([`history`]), the checker
//! that judges them ([`checker`]) and a self-contained HTML time line of a
//! run ([`timeline`]). Pure logic: running the clusters is elsewhere.

pub mod checker;
pub mod history;
pub mod timeline;
