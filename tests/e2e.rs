//! End-to-end suite against a real Kubernetes cluster: the same scenarios as the sandbox
//! integration tests. Runs only when DIORCH_E2E_KUBECONFIG names a kubeconfig; it installs
//! `crds/` itself, works in its own namespace, and deletes that namespace at the end.

mod common;

use std::path::PathBuf;

use common::{Kubectl, foundation};

fn target() -> Option<(PathBuf, tempfile::TempDir)> {
    match std::env::var_os("DIORCH_E2E_KUBECONFIG") {
        Some(path) => Some((PathBuf::from(path), tempfile::tempdir().expect("tempdir"))),
        None => {
            eprintln!(
                "skipping the real-cluster e2e suite: set DIORCH_E2E_KUBECONFIG to a kubeconfig to run it"
            );
            None
        }
    }
}

/// Deletes the scenario namespace even when an assertion fails.
struct NamespaceGuard<'a>(&'a Kubectl, &'a str);

impl Drop for NamespaceGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["delete", "namespace", self.1, "--wait=false"]);
    }
}

#[test]
fn e2e_foundation() {
    let Some((kubeconfig, scratch)) = target() else {
        return;
    };
    let k = Kubectl::new(&kubeconfig, scratch.path());
    let ns = format!("diorch-e2e-{}", std::process::id());
    foundation::install_crd(&k);
    foundation::create_namespace(&k, &ns);
    let _guard = NamespaceGuard(&k, &ns);
    foundation::samples_apply_and_print_columns(&k, &ns);
    foundation::invalid_dijobs_are_refused(&k, &ns);
    foundation::status_subresource_split(&k, &ns);
    foundation::owner_deletion_cascades(&k, &ns);
}
