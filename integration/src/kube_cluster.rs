//! A real kube-apiserver on etcd 3.6 (work in progress).
