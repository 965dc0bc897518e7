//! Mutator plugin: node selectors and tolerations per task type, from its config string.
//!
//! Config (JSON): `{"<task type>" | "*": {"nodeSelector": {k: v}, "tolerations": [v1.Toleration]}}`;
//! the entry for the task type wins over `"*"` key by key; tolerations of both are added.

use std::collections::BTreeMap;

use diorch_plugin_sdk::{Mutator, PluginError, Pod, TaskContext};
use serde_json::Value;

pub struct NodePlacement;

#[derive(Default)]
struct Placement {
    node_selector: BTreeMap<String, String>,
    tolerations: Vec<Value>,
}

fn parse_entry(v: &Value, key: &str, into: &mut Placement) -> Result<(), PluginError> {
    let bad = |what: &str| PluginError::InvalidInput(format!("config entry {key:?}: {what}"));
    let obj = v.as_object().ok_or_else(|| bad("not an object"))?;
    for (field, value) in obj {
        match field.as_str() {
            "nodeSelector" => {
                for (k, v) in value
                    .as_object()
                    .ok_or_else(|| bad("nodeSelector is not an object"))?
                {
                    let v = v
                        .as_str()
                        .ok_or_else(|| bad("nodeSelector values must be strings"))?;
                    into.node_selector.insert(k.clone(), v.to_string());
                }
            }
            "tolerations" => {
                let list = value
                    .as_array()
                    .ok_or_else(|| bad("tolerations is not a list"))?;
                if list.iter().any(|t| !t.is_object()) {
                    return Err(bad("each toleration must be an object"));
                }
                into.tolerations.extend(list.iter().cloned());
            }
            other => return Err(bad(&format!("unknown field {other:?}"))),
        }
    }
    Ok(())
}

fn placement_for(config: &str, task_type: &str) -> Result<Placement, PluginError> {
    let config: Value = serde_json::from_str(config)
        .map_err(|e| PluginError::InvalidInput(format!("config is not JSON: {e}")))?;
    let obj = config
        .as_object()
        .ok_or_else(|| PluginError::InvalidInput("config must be a JSON object".into()))?;
    let mut placement = Placement::default();
    for key in ["*", task_type] {
        if let Some(entry) = obj.get(key) {
            parse_entry(entry, key, &mut placement)?;
        }
    }
    Ok(placement)
}

impl Mutator for NodePlacement {
    fn mutate(ctx: &TaskContext, pod: &mut Pod) -> Result<(), PluginError> {
        let placement = placement_for(&ctx.config, &ctx.task_type)?;
        for (k, v) in &placement.node_selector {
            pod.set_node_selector(k, v);
        }
        for t in placement.tolerations {
            pod.add_toleration(t);
        }
        Ok(())
    }
}

diorch_plugin_sdk::export_mutator!(NodePlacement);

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn ctx(task_type: &str, config: &str) -> TaskContext {
        TaskContext {
            job_key: "ns/j".into(),
            task_name: task_type.into(),
            task_type: task_type.into(),
            rank: 0,
            task_rank: 0,
            world_size: 2,
            node: None,
            job_labels: vec![],
            job_annotations: vec![],
            config: config.into(),
        }
    }

    const POD: &str =
        r#"{"metadata":{"name":"p"},"spec":{"containers":[{"name":"di-container"}]}}"#;
    const CONFIG: &str = r#"{
        "*": {"nodeSelector": {"pool": "default", "arch": "amd64"}},
        "learner": {"nodeSelector": {"pool": "gpu"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    }"#;

    #[test]
    fn per_type_entry_overrides_the_default() {
        let mut pod = Pod::parse(POD).unwrap();
        NodePlacement::mutate(&ctx("learner", CONFIG), &mut pod).unwrap();
        assert_eq!(pod.node_selector("pool"), Some("gpu"));
        assert_eq!(pod.node_selector("arch"), Some("amd64"));
        assert_eq!(pod.tolerations().len(), 1);

        let mut pod = Pod::parse(POD).unwrap();
        NodePlacement::mutate(&ctx("collector", CONFIG), &mut pod).unwrap();
        assert_eq!(pod.node_selector("pool"), Some("default"));
        assert!(pod.tolerations().is_empty());
    }

    #[test]
    fn bad_config_is_a_clear_error() {
        let mut pod = Pod::parse(POD).unwrap();
        for (config, needle) in [
            ("not json", "not JSON"),
            ("[]", "JSON object"),
            (r#"{"*": {"nodeSelector": {"a": 1}}}"#, "strings"),
            (r#"{"*": {"affinity": {}}}"#, "unknown field"),
        ] {
            let err = NodePlacement::mutate(&ctx("learner", config), &mut pod).unwrap_err();
            assert!(err.to_string().contains(needle), "{config}: {err}");
        }
    }
}
