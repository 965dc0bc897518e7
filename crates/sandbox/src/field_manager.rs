//! The field manager the simulated cluster (nodes, scheduler, kubelet) writes under, and the
//! `kube` request parameters that carry it. Owns only these constants; it must not depend on any
//! other module of the sandbox, so that `lib.rs`, `kubelet.rs` and `sim_loop` can all use it.

/// The field manager of the simulated nodes', scheduler's and kubelet's writes, so that on a real
/// API server (`serve --attach`) `managedFields` say who wrote what.
pub(crate) const FIELD_MANAGER: &str = "diorch-sandbox";

pub(crate) fn post_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

pub(crate) fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}
