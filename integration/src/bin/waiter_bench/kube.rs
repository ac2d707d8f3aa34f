//! `--backend kube`: not measured yet.

use fencing_integration::bench::BoxError;

use super::Report;

pub(super) async fn run(_counts: &[usize], _report: &mut Report) -> Result<(), BoxError> {
    Err("--backend kube is not implemented yet".into())
}
