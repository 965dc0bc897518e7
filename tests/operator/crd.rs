//! The checked-in CRD under `crds/` is exactly what `diorch crd` generates, and it stays
//! installable with client-side `kubectl apply`.

use std::path::Path;

const CRD_PATH: &str = "crds/dijobs.diengine.opendilab.org.yaml";

#[test]
fn checked_in_crd_is_up_to_date() {
    let generated = diorch_core::api::crd::dijob_crd_yaml().expect("render CRD");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(CRD_PATH);
    if std::env::var_os("DIORCH_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write CRD");
    }
    let checked_in = std::fs::read_to_string(&path).expect("read checked-in CRD");
    assert!(
        checked_in == generated,
        "{CRD_PATH} is stale: regenerate it with `cargo run -- crd > {CRD_PATH}` (or DIORCH_BLESS=1 cargo test --test operator crd::)"
    );
    // kustomize reads no file outside a kustomization's directory, so deploy/ carries a copy
    // (and `kubectl apply -f crds/` must keep finding only the CRD there).
    const DEPLOY_COPY: &str = "deploy/base/crd.yaml";
    let copy = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEPLOY_COPY);
    if std::env::var_os("DIORCH_BLESS").is_some() {
        std::fs::write(&copy, &generated).expect("write CRD copy");
    }
    assert!(
        std::fs::read_to_string(&copy).expect("read the deploy/ copy") == generated,
        "{DEPLOY_COPY} differs from the CRD: DIORCH_BLESS=1 cargo test --test operator crd::"
    );
    let files: Vec<String> = std::fs::read_dir(path.parent().expect("crds/"))
        .expect("list crds/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["dijobs.diengine.opendilab.org.yaml"]);
}

#[test]
fn crd_fits_the_client_side_apply_annotation() {
    // `kubectl apply` stores the object as compact JSON in an annotation; all annotations
    // together must stay under 256 KiB (262144 bytes).
    let crd = diorch_core::api::crd::dijob_crd();
    let json = serde_json::to_string(&crd).expect("serialise CRD");
    assert!(
        json.len() < 200 * 1024,
        "CRD is {} bytes as JSON",
        json.len()
    );
}

#[test]
fn crd_matches_di_orchestrator_names_and_columns() {
    let crd = diorch_core::api::crd::dijob_crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("dijobs.diengine.opendilab.org")
    );
    assert_eq!(crd.spec.group, "diengine.opendilab.org");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "DIJob");
    assert_eq!(crd.spec.names.plural, "dijobs");
    assert_eq!(crd.spec.names.singular.as_deref(), Some("dijob"));
    assert_eq!(crd.spec.names.short_names, Some(vec!["dijob".to_string()]));
    assert_eq!(crd.spec.versions.len(), 1);
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v2alpha1");
    assert!(version.served && version.storage);
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let columns: Vec<(&str, &str, &str)> = version
        .additional_printer_columns
        .as_ref()
        .expect("printer columns")
        .iter()
        .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        columns,
        vec![
            ("Phase", "string", ".status.phase"),
            ("ReadyReplicas", "integer", ".status.readyReplicas"),
            ("Replicas", "integer", ".status.replicas"),
            ("Restarts", "integer", ".status.restarts"),
            ("Reschedules", "integer", ".status.reschedules"),
            ("Age", "date", ".metadata.creationTimestamp"),
            ("Allocation", "string", ".status.allocation"),
        ]
    );
    // Only `kubectl get -o wide` shows the allocation: it can be long.
    let priorities: Vec<i32> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.priority.unwrap_or(0))
        .collect();
    assert_eq!(priorities, [0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(crd.spec.names.categories, Some(vec!["ai".to_string()]));
}
