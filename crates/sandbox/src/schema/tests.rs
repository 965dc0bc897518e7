//! Tests of the structural-schema engine: messages, pruning, defaulting, list types, embedded
//! resources, metadata rules, non-structural schemas, and property tests of the formats.

use serde_json::json;

use super::*;

fn job_schema() -> StructuralSchema {
    StructuralSchema::compile(&json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["tasks"],
                    "properties": {
                        "cleanPodPolicy": {"type": "string", "enum": ["Running", "All", "None"], "default": "Running"},
                        "priority": {"type": "string", "nullable": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 5}},
                        "tasks": {
                            "type": "array",
                            "maxItems": 3,
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {
                                "type": "object",
                                "properties": {
                                    "name": {"type": "string", "minLength": 2},
                                    "type": {"type": "string", "default": "none"},
                                    "replicas": {"type": "integer", "format": "int32", "minimum": 1, "default": 1},
                                    "ratio": {"type": "number", "maximum": 1.5, "exclusiveMaximum": true},
                                    "port": {"x-kubernetes-int-or-string": true},
                                    "opts": {"type": "object", "properties": {"a": {"type": "integer", "default": 7}}, "default": {}},
                                    "template": {
                                        "type": "object",
                                        "x-kubernetes-embedded-resource": true,
                                        "x-kubernetes-preserve-unknown-fields": true
                                    }
                                }
                            }
                        },
                        "ids": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                },
                "status": {"type": "object", "properties": {"phase": {"type": "string", "enum": ["A"]}}}
            }
        }))
        .expect("compiles")
}

fn msgs(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

#[test]
fn brief_messages() {
    let s = job_schema();
    let errs = s.validate(&json!({"spec": {"cleanPodPolicy": "Bad", "tasks": [{"replicas": 0}]}}));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"spec.cleanPodPolicy: Unsupported value: "Bad": supported values: "Running", "All", "None""#,
            "spec.tasks[0].replicas: Invalid value: 0: spec.tasks[0].replicas in body should be greater than or equal to 1",
        ]
    );
    assert_eq!(errs[0].kind.reason(), "FieldValueNotSupported");
    let errs = s.validate(&json!({"spec": {}}));
    assert_eq!(msgs(&errs), vec!["spec.tasks: Required value"]);
    assert_eq!(errs[0].kind, FieldErrorKind::Required);
    // kube-openapi reports the JSON type name as the bad value, not the value itself.
    let errs = s.validate(&json!({"spec": {"tasks": [{"replicas": "x"}]}}));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"spec.tasks[0].replicas: Invalid value: "string": spec.tasks[0].replicas in body must be of type integer: "string""#
        ]
    );
    assert_eq!(errs[0].kind.reason(), "FieldValueTypeInvalid");
}

#[test]
fn numbers_strings_lists() {
    let s = job_schema();
    let errs = s.validate(&json!({"spec": {"tasks": [
            {"name": "a", "ratio": 1.5, "replicas": 2.0},
            {"name": "bb", "replicas": 1.5},
            {"name": "cc"}, {"name": "dd"}
        ], "labels": {"k": "toolong"}}}));
    assert_eq!(
        msgs(&errs),
        vec![
            "spec.labels.k: Too long: may not be more than 5 bytes",
            r#"spec.tasks[0].name: Invalid value: "a": spec.tasks[0].name in body should be at least 2 chars long"#,
            "spec.tasks[0].ratio: Invalid value: 1.5: spec.tasks[0].ratio in body should be less than 1.5",
            r#"spec.tasks[1].replicas: Invalid value: "number": spec.tasks[1].replicas in body must be of type integer: "number""#,
            "spec.tasks: Too many: 4: must have at most 3 items",
        ]
    );
}

#[test]
fn int_or_string_and_null() {
    let s = job_schema();
    assert!(s.validate(&json!({"spec": {"tasks": [{"name": "aa", "port": 80}, {"name": "bb", "port": "http"}]}})).is_empty());
    let errs = s.validate(&json!({"spec": {"tasks": [{"port": true}]}}));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"spec.tasks[0].port: Invalid value: "boolean": spec.tasks[0].port in body must be of type integer,string: "boolean""#
        ]
    );
    // nullable accepts null; a non-nullable null is an error unless pruned first.
    assert!(
        s.validate(&json!({"spec": {"tasks": [], "priority": null}}))
            .is_empty()
    );
    let mut obj = json!({"spec": {"tasks": [], "labels": null, "cleanPodPolicy": null}});
    let errs = s.validate(&obj);
    assert_eq!(
        msgs(&errs)[0],
        r#"spec.cleanPodPolicy: Invalid value: "null": spec.cleanPodPolicy in body must be of type string: "null""#
    );
    assert!(s.prune(&mut obj).is_empty());
    // labels (no default) is dropped; cleanPodPolicy keeps its null for defaulting.
    assert_eq!(obj, json!({"spec": {"tasks": [], "cleanPodPolicy": null}}));
    s.apply_defaults(&mut obj);
    assert_eq!(obj["spec"]["cleanPodPolicy"], "Running");
    assert!(s.validate(&obj).is_empty());
}

#[test]
fn pruning_paths() {
    let s = job_schema();
    let mut obj = json!({
        "apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "bogus": 1},
        "foo": 1,
        "spec": {"bar": {"x": 1}, "tasks": [{"name": "aa", "zzz": true,
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1}, "spec": {"any": 1}}}],
            "extra": {"kept": {"deep": 1}}},
        "status": {"phase": "A", "other": 2}
    });
    let paths = s.prune(&mut obj);
    assert_eq!(
        paths,
        vec![
            "foo",
            "spec.bar",
            "spec.tasks[0].template.metadata.junk",
            "spec.tasks[0].zzz",
            "status.other"
        ]
    );
    assert_eq!(obj["metadata"]["bogus"], 1, "root metadata is never pruned");
    assert_eq!(obj["spec"]["extra"]["kept"]["deep"], 1);
    assert_eq!(obj["spec"]["tasks"][0]["template"]["spec"]["any"], 1);
    assert!(obj.get("foo").is_none());
}

#[test]
fn defaults_in_arrays_maps_and_default_objects() {
    let s = StructuralSchema::compile(&json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "tasks": {"type": "array", "items": {"type": "object", "properties": {
                        "replicas": {"type": "integer", "default": 1},
                        "opts": {"type": "object", "default": {"junk": 1}, "properties": {"a": {"type": "integer", "default": 7}}}
                    }}},
                    "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}}}
                }}
            }
        }))
        .unwrap();
    let mut obj =
        json!({"spec": {"tasks": [{}, {"replicas": 4, "opts": {"a": 1}}], "byName": {"x": {}}}});
    s.apply_defaults(&mut obj);
    assert_eq!(
        obj,
        json!({"spec": {"tasks": [{"replicas": 1, "opts": {"a": 7}}, {"replicas": 4, "opts": {"a": 1}}], "byName": {"x": {"n": 3}}}})
    );
}

#[test]
fn list_map_and_set_duplicates() {
    let s = job_schema();
    let errs = s.validate(&json!({"spec": {"tasks": [{"name": "aa"}, {"name": "aa"}, {}], "ids": ["a", "b", "a", "a"]}}));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"spec.ids[2]: Duplicate value: "a""#,
            r#"spec.tasks[1]: Duplicate value: map[string]interface {}{"name":"aa"}"#,
        ]
    );
    assert_eq!(errs[0].kind.reason(), "FieldValueDuplicate");
    let multi = StructuralSchema::compile(&json!({"type": "object", "properties": {"l": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a", "b"],
            "items": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}}}}))
        .unwrap();
    let errs = multi.validate(
        &json!({"l": [{"a": "x", "b": 1}, {"a": "x", "b": 2}, {"b": 1, "a": "x"}, {}, {}]}),
    );
    assert_eq!(
        msgs(&errs),
        vec![
            r#"l[2]: Duplicate value: map[string]interface {}{"a":"x", "b":1}"#,
            "l[4]: Duplicate value: map[string]interface {}{}",
        ]
    );
}

#[test]
fn embedded_resources() {
    let s = job_schema();
    let errs = s.validate(&json!({"spec": {"tasks": [{"name": "aa", "template": {"kind": "bad_kind", "metadata": {"name": "a/b", "labels": {"x": "-"}}}}]}}));
    let m = msgs(&errs);
    assert_eq!(
        m[0],
        "spec.tasks[0].template.apiVersion: Required value: must not be empty"
    );
    assert!(m[1].starts_with(r#"spec.tasks[0].template.kind: Invalid value: "bad_kind": may have mixed case, but should otherwise match: a DNS-1035 label"#), "{m:?}");
    assert_eq!(
        m[2],
        r#"spec.tasks[0].template.metadata.name: Invalid value: "a/b": may not contain '/'"#
    );
    assert!(m[3].starts_with(r#"spec.tasks[0].template.metadata.labels: Invalid value: "-": a valid label must be an empty string"#));
    assert_eq!(m.len(), 4);
}

#[test]
fn metadata_rules() {
    let errs = validate_object_meta(&json!({}), NameRule::Dns1123Subdomain);
    assert_eq!(
        msgs(&errs),
        vec!["metadata.name: Required value: name or generateName is required"]
    );
    assert!(
        validate_object_meta(&json!({"generateName": "job-"}), NameRule::Dns1123Subdomain)
            .is_empty()
    );
    let errs = validate_object_meta(&json!({"name": "Bad_Name"}), NameRule::Dns1123Subdomain);
    assert_eq!(
        msgs(&errs),
        vec![
            r#"metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#
        ]
    );
    let errs = validate_object_meta(&json!({"name": "a.b"}), NameRule::Dns1123Label);
    assert_eq!(
        msgs(&errs),
        vec![r#"metadata.name: Invalid value: "a.b": must not contain dots"#]
    );
    assert!(validate_object_meta(&json!({"name": "1abc"}), NameRule::Dns1035Label).len() == 1);
    let errs = validate_object_meta(
        &json!({"name": "ok", "labels": {"/x": "v"}, "annotations": {"big": "x".repeat(262_142)}}),
        NameRule::Dns1123Subdomain,
    );
    assert_eq!(
        msgs(&errs),
        vec![
            r#"metadata.labels: Invalid value: "/x": prefix part must be non-empty"#,
            "metadata.annotations: Too long: may not be more than 262144 bytes",
        ]
    );
    assert_eq!(errs[1].kind.reason(), "FieldValueTooLong");
    let errs = validate_object_meta_scoped(&json!({"name": "a"}), NameRule::Dns1123Subdomain, true);
    assert_eq!(msgs(&errs), vec!["metadata.namespace: Required value"]);
}

#[test]
fn non_structural_schemas_and_cel() {
    assert!(matches!(
        StructuralSchema::compile(&json!({"type": "object", "properties": {"a": {}}})),
        Err(SchemaError::NotStructural(_))
    ));
    assert!(
        StructuralSchema::compile(
            &json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}})
        )
        .is_err()
    );
    let ok = StructuralSchema::compile(&json!({"type": "object", "x-kubernetes-validations": [{"rule": "true"}],
            "properties": {"p": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}}))
        .unwrap();
    assert!(ok.has_cel());
    assert!(!job_schema().has_cel());
}

#[test]
fn value_rendering_and_composites() {
    let s = StructuralSchema::compile(&json!({"type": "object", "properties": {
            "e": {"type": "integer", "enum": [1, 2]},
            "o": {"type": "object", "properties": {"a": {"type": "string"}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "d": {"type": "string", "format": "date-time"}
        }}))
        .unwrap();
    let errs = s.validate(&json!({"e": 3, "o": {}, "d": "yesterday"}));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"d: Invalid value: "yesterday": d in body must be of type date-time: "yesterday""#,
            r#"e: Unsupported value: 3: supported values: "1", "2""#,
            r#"<nil>: Invalid value: "": "o" must validate one and only one schema (oneOf). Found none valid"#,
            "o.a: Required value",
        ]
    );
    assert!(
        s.validate(&json!({"d": "2024-01-02T03:04:05Z", "o": {"a": "x"}}))
            .is_empty()
    );
    let e = FieldError::new(
        FieldErrorKind::Invalid,
        "x",
        Some(json!({"b": [1, null], "a": "q"})),
        "bad",
    );
    assert_eq!(
        e.to_string(),
        r#"x: Invalid value: map[string]interface {}{"a":"q", "b":[]interface {}{1, interface {}(nil)}}: bad"#
    );
}

#[test]
fn status_validation_paths() {
    let errs = job_schema().validate_status(&json!({"phase": "B"}));
    assert_eq!(
        msgs(&errs),
        vec![r#"status.phase: Unsupported value: "B": supported values: "A""#]
    );
}

/// Format checks run on any string a client sends: never a panic, and a non-ASCII
/// character never passes a format whose valid values are ASCII.
mod format_props {
    use super::super::formats::{format_known, format_ok};
    use proptest::prelude::*;

    const FORMATS: [&str; 16] = [
        "byte",
        "date",
        "datetime",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "hostname",
        "hexcolor",
        "bsonobjectid",
        "password",
        "unknown",
    ];

    proptest! {
        #[test]
        fn any_unicode_string_is_checked_without_a_panic(
            s in "\\PC{0,40}",
            f in proptest::sample::select(FORMATS.to_vec()),
        ) {
            let ok = format_ok(f, &s);
            if ok && format_known(f) && f != "password" {
                prop_assert!(s.is_ascii(), "{f} accepted {s:?}");
            }
        }

        #[test]
        fn date_times_with_a_character_cut_anywhere_are_refused_not_panicked_on(
            prefix in 0usize..25,
            c in "\\PC",
        ) {
            let valid = "2024-01-01T00:00:00.5+01:00";
            let cut = prefix.min(valid.len());
            let s = format!("{}{c}{}", &valid[..cut], &valid[cut..]);
            let ok = format_ok("datetime", &s);
            if !c.is_ascii() {
                prop_assert!(!ok, "{s:?}");
            }
        }
    }

    #[test]
    fn the_reported_panic_is_a_refusal() {
        assert!(!format_ok("datetime", "2024-01-01T00:00:0\u{e9}"));
        assert!(!format_ok("datetime", "2024-01-01T00:00:00+1\u{e9}00"));
        assert!(format_ok("datetime", "2024-01-01T00:00:00+01:00"));
    }
}
