//! KubeLeaseSource fixtures on the real apiserver (work in progress).
