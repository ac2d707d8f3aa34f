//! Kubernetes backend for fencing (work in progress).
