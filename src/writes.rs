//! The name diorch writes under: every create, update and patch it sends carries the field
//! manager `diorch`, so an object's `managedFields` say which fields the operator wrote (and
//! `kubectl apply --server-side` reports conflicts with it by name). Owns only the write
//! parameters; makes no call.

use kube::api::{PatchParams, PostParams};

/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "diorch";

/// Parameters of a create or replace, under [`FIELD_MANAGER`].
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// Parameters of a (non-apply) patch, under [`FIELD_MANAGER`].
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube sends these as the `fieldManager` query parameter of the write.
    #[test]
    fn every_write_parameter_names_the_manager() {
        assert_eq!(post_params().field_manager.as_deref(), Some("diorch"));
        assert_eq!(patch_params().field_manager.as_deref(), Some("diorch"));
        assert!(!post_params().dry_run && !patch_params().dry_run);
        assert!(!patch_params().force);
    }
}
