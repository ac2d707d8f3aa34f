//! Leader election over any fencing source (work in progress).
