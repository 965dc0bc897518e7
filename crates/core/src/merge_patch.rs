//! JSON merge patches (RFC 7386) computed from two states of a document: the status writes of
//! the controller send only what changed, guarded by the resourceVersion the change was planned
//! from. Owns the diff; sends nothing.

use serde_json::{Map, Value};

/// The merge patch that turns `old` into `new`: members whose value changed as they are now,
/// members gone as `null`, arrays and scalars whole. `None` when the two are equal.
///
/// A member of `new` whose value is `null` is sent as `null`, which a merge patch reads as
/// "remove": the Kubernetes API reads an absent field as a null one, so the stored object means
/// the same.
pub fn diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return Some(new.clone());
    };
    let mut patch = Map::new();
    for (key, before) in old {
        match new.get(key) {
            None => {
                patch.insert(key.clone(), Value::Null);
            }
            Some(after) => {
                if let Some(changed) = diff(before, after) {
                    patch.insert(key.clone(), changed);
                }
            }
        }
    }
    for (key, after) in new {
        if !old.contains_key(key) {
            patch.insert(key.clone(), after.clone());
        }
    }
    Some(Value::Object(patch))
}

/// The body of a status merge patch from `old` to `new` that the API server applies only to
/// the object at `resource_version` (409 Conflict otherwise). `None` when nothing changed.
pub fn status_patch(resource_version: &str, old: &Value, new: &Value) -> Option<Value> {
    let status = diff(old, new)?;
    let mut metadata = Map::new();
    metadata.insert(
        "resourceVersion".to_string(),
        Value::String(resource_version.to_string()),
    );
    let mut body = Map::new();
    body.insert("metadata".to_string(), Value::Object(metadata));
    body.insert("status".to_string(), status);
    Some(Value::Object(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn applied(old: &Value, patch: &Value) -> Value {
        let mut doc = old.clone();
        json_patch::merge(&mut doc, patch);
        doc
    }

    #[test]
    fn only_what_changed_is_sent_and_removed_members_are_null() {
        let old = json!({
            "phase": "Starting",
            "readyReplicas": 1,
            "conditions": [{"type": "Starting", "status": "True"}],
            "taskStatus": {"learner": {"Running": 1}, "collector": {"Pending": 2}},
            "reason": "x",
        });
        let new = json!({
            "phase": "Running",
            "readyReplicas": 1,
            "conditions": [
                {"type": "Starting", "status": "True"},
                {"type": "Running", "status": "True"},
            ],
            "taskStatus": {"learner": {"Running": 1}, "collector": {"Running": 2}},
        });
        let patch = diff(&old, &new).unwrap();
        assert_eq!(
            patch,
            json!({
                "phase": "Running",
                "conditions": [
                    {"type": "Starting", "status": "True"},
                    {"type": "Running", "status": "True"},
                ],
                "taskStatus": {"collector": {"Pending": null, "Running": 2}},
                "reason": null,
            })
        );
        assert_eq!(applied(&old, &patch), new);
    }

    #[test]
    fn equal_documents_need_no_patch_and_a_first_status_goes_whole() {
        let status = json!({"phase": "Pending", "replicas": 0});
        assert_eq!(diff(&status, &status), None);
        assert_eq!(status_patch("7", &status, &status), None);
        assert_eq!(
            status_patch("7", &Value::Null, &status).unwrap(),
            json!({"metadata": {"resourceVersion": "7"}, "status": status})
        );
    }

    fn any_json() -> impl Strategy<Value = Value> {
        // Nulls are left out of the generated documents: a merge patch cannot store a null
        // member (it means "remove"), which the API server treats as absent anyway.
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn applying_the_diff_gives_the_new_document(old in any_json(), new in any_json()) {
            match diff(&old, &new) {
                None => prop_assert_eq!(&old, &new),
                Some(patch) => prop_assert_eq!(applied(&old, &patch), new),
            }
        }
    }
}
