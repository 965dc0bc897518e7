//! Typed helpers over the pod JSON a mutator receives: small, allocation-light edits of the
//! fields mutators commonly touch, without pulling the Kubernetes API types into the guest.

use serde_json::{Map, Value};

use crate::PluginError;

/// A pod as JSON (`v1.Pod`). Edits create missing intermediate objects.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod(Value);

fn object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        // ok: replaced by an object just above.
        _ => unreachable!(),
    }
}

fn child<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    object(v)
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()))
}

fn array<'a>(v: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    let slot = object(v)
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    match slot {
        Value::Array(a) => a,
        // ok: replaced by an array just above.
        _ => unreachable!(),
    }
}

impl Pod {
    pub fn parse(json: &str) -> Result<Pod, PluginError> {
        let v: Value = serde_json::from_str(json)
            .map_err(|e| PluginError::InvalidInput(format!("pod is not JSON: {e}")))?;
        if !v.is_object() {
            return Err(PluginError::InvalidInput("pod is not a JSON object".into()));
        }
        Ok(Pod(v))
    }

    pub fn to_json(&self) -> String {
        self.0.to_string()
    }

    pub fn value(&self) -> &Value {
        &self.0
    }

    pub fn value_mut(&mut self) -> &mut Value {
        &mut self.0
    }

    pub fn name(&self) -> Option<&str> {
        self.0.pointer("/metadata/name")?.as_str()
    }

    pub fn set_name(&mut self, name: &str) {
        object(child(&mut self.0, "metadata")).insert("name".into(), name.into());
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.0.get("metadata")?.get("labels")?.get(key)?.as_str()
    }

    pub fn set_label(&mut self, key: &str, value: &str) {
        let labels = child(child(&mut self.0, "metadata"), "labels");
        object(labels).insert(key.into(), value.into());
    }

    pub fn set_annotation(&mut self, key: &str, value: &str) {
        let annotations = child(child(&mut self.0, "metadata"), "annotations");
        object(annotations).insert(key.into(), value.into());
    }

    pub fn set_node_selector(&mut self, key: &str, value: &str) {
        let selector = child(child(&mut self.0, "spec"), "nodeSelector");
        object(selector).insert(key.into(), value.into());
    }

    pub fn node_selector(&self, key: &str) -> Option<&str> {
        self.0.get("spec")?.get("nodeSelector")?.get(key)?.as_str()
    }

    /// Adds a toleration (a `v1.Toleration` object) unless an equal one is there.
    pub fn add_toleration(&mut self, toleration: Value) {
        let list = array(child(&mut self.0, "spec"), "tolerations");
        if !list.contains(&toleration) {
            list.push(toleration);
        }
    }

    pub fn tolerations(&self) -> &[Value] {
        self.0
            .pointer("/spec/tolerations")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// Names of `spec.containers`, in order.
    pub fn container_names(&self) -> Vec<&str> {
        self.0
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(|cs| cs.iter().filter_map(|c| c.get("name")?.as_str()).collect())
            .unwrap_or_default()
    }

    fn containers_mut<'a>(
        &'a mut self,
        container: Option<&'a str>,
    ) -> impl Iterator<Item = &'a mut Value> {
        array(child(&mut self.0, "spec"), "containers")
            .iter_mut()
            .filter(move |c| {
                container.is_none_or(|n| c.get("name").and_then(Value::as_str) == Some(n))
            })
    }

    /// Sets env var `name` in `container` (every container when `None`), replacing an existing
    /// plain value; returns how many containers were changed.
    pub fn set_env(&mut self, container: Option<&str>, name: &str, value: &str) -> usize {
        let mut changed = 0;
        for c in self.containers_mut(container) {
            let env = array(c, "env");
            let entry = serde_json::json!({"name": name, "value": value});
            match env
                .iter_mut()
                .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
            {
                Some(e) => *e = entry,
                None => env.push(entry),
            }
            changed += 1;
        }
        changed
    }

    /// Removes env var `name` from every container.
    pub fn remove_env(&mut self, name: &str) {
        for c in self.containers_mut(None) {
            array(c, "env").retain(|e| e.get("name").and_then(Value::as_str) != Some(name));
        }
    }

    /// The plain value of env var `name` in `container`.
    pub fn env(&self, container: &str, name: &str) -> Option<&str> {
        self.0
            .pointer("/spec/containers")?
            .as_array()?
            .iter()
            .find(|c| c.get("name").and_then(Value::as_str) == Some(container))?
            .get("env")?
            .as_array()?
            .iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(name))?
            .get("value")?
            .as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j-learner-0","labels":{"diengine/job":"j"}},
        "spec":{"containers":[{"name":"di-container","env":[{"name":"DI_RANK","value":"0"}]},{"name":"side"}]}}"#;

    #[test]
    fn edits_round_trip() {
        let mut pod = Pod::parse(POD).unwrap();
        assert_eq!(pod.name(), Some("j-learner-0"));
        assert_eq!(pod.container_names(), vec!["di-container", "side"]);
        assert_eq!(pod.set_env(Some("di-container"), "NCCL_DEBUG", "INFO"), 1);
        assert_eq!(pod.set_env(None, "X", "1"), 2);
        assert_eq!(pod.set_env(None, "X", "2"), 2);
        pod.set_node_selector("pool", "gpu");
        let tol = serde_json::json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"});
        pod.add_toleration(tol.clone());
        pod.add_toleration(tol);
        let back = Pod::parse(&pod.to_json()).unwrap();
        assert_eq!(back.env("di-container", "NCCL_DEBUG"), Some("INFO"));
        assert_eq!(back.env("side", "X"), Some("2"));
        assert_eq!(back.env("di-container", "DI_RANK"), Some("0"));
        assert_eq!(back.node_selector("pool"), Some("gpu"));
        assert_eq!(back.tolerations().len(), 1);
        assert_eq!(back.label("diengine/job"), Some("j"));
    }

    #[test]
    fn remove_env_and_rename() {
        let mut pod = Pod::parse(POD).unwrap();
        pod.remove_env("DI_RANK");
        pod.set_name("other");
        assert_eq!(pod.env("di-container", "DI_RANK"), None);
        assert_eq!(pod.name(), Some("other"));
    }

    #[test]
    fn rejects_non_objects() {
        assert!(Pod::parse("[1]").is_err());
        assert!(Pod::parse("{").is_err());
    }
}
