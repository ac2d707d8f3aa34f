//! Kubernetes: a real kube-apiserver on its own etcd ([`cluster`]), its
//! certificates ([`pki`]), kubeconfigs ([`kubeconfig`]) and RBAC rules
//! ([`rbac`]), and the fixture that runs the shared conformance checks
//! against it ([`fixture`]).

pub mod cluster;
pub mod fixture;
pub mod kubeconfig;
pub mod pki;
pub mod rbac;
