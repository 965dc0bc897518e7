//! The generated CRD's schema, run through the sandbox's structural-schema engine (the same
//! pruning, defaulting and validation a real API server applies), accepts every
//! DI-orchestrator sample unchanged and refuses invalid variants naming the field.

use diorch_sandbox::schema::StructuralSchema;
use serde_json::{Value, json};

fn schema() -> StructuralSchema {
    let crd = serde_json::to_value(diorch_core::api::crd::dijob_crd()).expect("CRD as JSON");
    let open_api = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    StructuralSchema::compile(open_api).expect("the generated schema is structural")
}

fn samples() -> Vec<(String, Value)> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/di-orchestrator-samples");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("samples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read sample");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("valid YAML");
        for doc in docs.into_iter().filter(|d| d["kind"] == "DIJob") {
            out.push((file.display().to_string(), doc));
        }
    }
    assert_eq!(
        out.len(),
        3,
        "expected the three DI-orchestrator DIJob samples"
    );
    out
}

/// Prune, default and validate as the API server does on create; returns the stored object.
fn admit(schema: &StructuralSchema, mut obj: Value) -> Result<Value, Vec<String>> {
    let pruned = schema.prune(&mut obj);
    if !pruned.is_empty() {
        return Err(pruned
            .iter()
            .map(|p| format!("unknown field {p:?}"))
            .collect());
    }
    schema.apply_defaults(&mut obj);
    let errors = schema.validate(&obj);
    if errors.is_empty() {
        Ok(obj)
    } else {
        Err(errors.iter().map(|e| e.to_string()).collect())
    }
}

#[test]
fn every_sample_is_accepted_unchanged_by_the_schema() {
    let schema = schema();
    for (file, doc) in samples() {
        let stored = admit(&schema, doc.clone()).unwrap_or_else(|e| panic!("{file}: {e:?}"));
        // Nothing the user wrote was dropped (DI-orchestrator's own CRD prunes spec.group).
        assert_eq!(stored["spec"]["group"], doc["spec"]["group"], "{file}");
        assert_eq!(stored["spec"]["tasks"], doc["spec"]["tasks"], "{file}");
        let typed: diorch_core::api::DIJob = serde_json::from_value(stored).expect("typed DIJob");
        assert!(!typed.spec.tasks.is_empty());
    }
}

#[test]
fn defaults_match_di_orchestrator() {
    let schema = schema();
    let stored = admit(
        &schema,
        json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": {"name": "d"},
            "spec": {"tasks": [{"type": "learner", "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]}
        }),
    )
    .expect("valid");
    assert_eq!(stored["spec"]["priority"], "normal");
    assert_eq!(stored["spec"]["cleanPodPolicy"], "Running");
    assert_eq!(stored["spec"]["preemptible"], false);
    assert_eq!(stored["spec"]["backoffLimit"], 3);
    assert_eq!(stored["spec"]["tasks"][0]["replicas"], 1);
}

#[test]
fn template_labels_and_annotations_survive_pruning() {
    let schema = schema();
    let stored = admit(
        &schema,
        json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": {"name": "d"},
            "spec": {"tasks": [{"type": "learner", "template": {
                "metadata": {"labels": {"team": "rl"}, "annotations": {"note": "keep"}},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": 1, "memory": "2Gi"}}}]}
            }}]}
        }),
    )
    .expect("valid");
    let template = &stored["spec"]["tasks"][0]["template"];
    assert_eq!(template["metadata"]["labels"]["team"], "rl");
    assert_eq!(template["metadata"]["annotations"]["note"], "keep");
    // Quantities are int-or-string, as in the Kubernetes API.
    assert_eq!(
        template["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        1
    );
}

fn first_sample_with(edit: impl FnOnce(&mut Value)) -> Value {
    let (_, mut doc) = samples().remove(0);
    edit(&mut doc);
    doc
}

fn rejection(edit: impl FnOnce(&mut Value)) -> String {
    let schema = schema();
    match admit(&schema, first_sample_with(edit)) {
        Ok(_) => panic!("invalid variant accepted"),
        Err(errors) => errors.join("\n"),
    }
}

#[test]
fn invalid_variants_are_refused_naming_the_field() {
    let err = rejection(|d| d["spec"]["tasks"][0]["replicas"] = json!(0));
    assert!(
        err.contains("spec.tasks[0].replicas: Invalid value: 0: spec.tasks[0].replicas in body should be greater than or equal to 1"),
        "{err}"
    );

    let err = rejection(|d| d["spec"]["cleanPodPolicy"] = json!("Sometimes"));
    assert!(
        err.contains(r#"spec.cleanPodPolicy: Unsupported value: "Sometimes": supported values: "Running", "All", "None""#),
        "{err}"
    );

    let err = rejection(|d| d["spec"]["tasks"][1]["type"] = json!("trainer"));
    assert!(
        err.contains(r#"spec.tasks[1].type: Unsupported value: "trainer""#),
        "{err}"
    );

    let err = rejection(|d| {
        if let Some(spec) = d["spec"].as_object_mut() {
            spec.remove("tasks");
        }
    });
    assert!(err.contains("spec.tasks: Required value"), "{err}");

    let err = rejection(|d| d["spec"]["tasks"][0]["replicas"] = json!("two"));
    assert!(err.contains("spec.tasks[0].replicas"), "{err}");
    assert!(err.contains("must be of type integer"), "{err}");

    let err = rejection(|d| d["spec"]["preemptible"] = json!("yes"));
    assert!(err.contains("spec.preemptible"), "{err}");
    assert!(err.contains("must be of type boolean"), "{err}");

    // The pod template is validated too: a container without a name.
    let err = rejection(|d| {
        if let Some(c) = d["spec"]["tasks"][0]["template"]["spec"]["containers"][0].as_object_mut()
        {
            c.remove("name");
        }
    });
    assert!(
        err.contains("spec.tasks[0].template.spec.containers[0].name: Required value"),
        "{err}"
    );
}

/// `spec.priorityClassName` (a diorch extension): the controller's validation
/// (`validate::validate`, which the webhook runs too) refuses what the CRD schema does. The
/// sandbox's schema engine checks lengths but not `pattern` (it has no regex engine), so the
/// schema's pattern is checked to be apimachinery's DNS-1123 subdomain format, which a real API
/// server applies.
#[test]
fn priority_class_names_are_checked_alike_by_the_schema_and_validation() {
    let crd = serde_json::to_value(diorch_core::api::crd::dijob_crd()).expect("CRD as JSON");
    let field = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["priorityClassName"];
    assert_eq!(
        field["pattern"],
        // apimachinery's dns1123SubdomainFmt (pkg/util/validation), anchored.
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
    );
    assert_eq!(
        field["pattern"],
        diorch_core::api::DNS1123_SUBDOMAIN_PATTERN
    );
    assert_eq!(
        (field["minLength"].clone(), field["maxLength"].clone()),
        (json!(1), json!(253))
    );

    let schema = schema();
    let longest = [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61),
    ]
    .join(".");
    let too_long = format!("{longest}e");
    // (name, valid, refused by the sandbox's schema too: lengths only)
    let cases: [(&str, bool, bool); 14] = [
        ("high", true, false),
        ("team-a.batch", true, false),
        ("0", true, false),
        ("system-cluster-critical", true, false),
        (&longest, true, false),
        ("", false, true),
        ("High", false, false),
        ("under_score", false, false),
        ("-lead", false, false),
        ("trail-", false, false),
        ("dot.", false, false),
        ("two..dots", false, false),
        ("a.-b", false, false),
        (&too_long, false, true),
    ];
    for (name, valid, by_length) in cases {
        let doc = first_sample_with(|d| d["spec"]["priorityClassName"] = json!(name));
        let by_schema = admit(&schema, doc.clone());
        assert_eq!(by_schema.is_err(), by_length, "{name:?}: {by_schema:?}");
        if let Err(errors) = &by_schema {
            assert!(
                errors
                    .iter()
                    .all(|e| e.starts_with("spec.priorityClassName: ")),
                "{errors:?}"
            );
        }
        let job: diorch_core::api::DIJob = serde_json::from_value(doc).expect("typed DIJob");
        let by_validation = diorch_core::validate::validate(&job);
        assert_eq!(by_validation.is_ok(), valid, "{name:?}: {by_validation:?}");
        if let Err(invalid) = by_validation {
            assert_eq!(invalid.field, "spec.priorityClassName");
        }
    }
}

#[test]
fn numbers_that_size_the_operator_have_schema_maximums() {
    // api::limits: 1000 replicas per task (replicas, minReplicas, maxReplicas), 64 tasks.
    for field in ["replicas", "minReplicas", "maxReplicas"] {
        let err = rejection(|d| d["spec"]["tasks"][0][field] = json!(2_000_000_000));
        assert!(
            err.contains(&format!(
                "spec.tasks[0].{field}: Invalid value: 2000000000: spec.tasks[0].{field} in body should be less than or equal to 1000"
            )),
            "{err}"
        );
    }
    let schema = schema();
    let at_limit = first_sample_with(|d| {
        d["spec"]["tasks"][0]["replicas"] = json!(1000);
        d["spec"]["tasks"][0]["maxReplicas"] = json!(1000);
    });
    assert!(admit(&schema, at_limit).is_ok());
    let err = rejection(|d| {
        let task = d["spec"]["tasks"][0].clone();
        d["spec"]["tasks"] = Value::Array(
            (0..65)
                .map(|i| {
                    let mut t = task.clone();
                    t["type"] = json!("none");
                    t["name"] = json!(format!("t{i}"));
                    t
                })
                .collect(),
        );
    });
    assert!(
        err.contains("spec.tasks: Too many: 65: must have at most 64 items"),
        "{err}"
    );
}

#[test]
fn unknown_fields_are_reported_with_their_path() {
    let schema = schema();
    let mut doc = first_sample_with(|d| d["spec"]["tasks"][0]["colour"] = json!("blue"));
    let pruned = schema.prune(&mut doc);
    assert_eq!(pruned, vec!["spec.tasks[0].colour".to_string()]);
    assert!(doc["spec"]["tasks"][0].get("colour").is_none());
}
