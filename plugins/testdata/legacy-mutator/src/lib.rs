//! Test-only pod mutator built against the frozen 0.2.0 contract (`wit/v0.2`) with plain
//! wit-bindgen: it labels the pod `legacy-mutator: <task-type>-<rank>`. The host must keep
//! loading and calling it.

wit_bindgen::generate!({ path: "../../../wit/v0.2/plugins.wit", world: "pod-mutator" });

struct Legacy;

impl Guest for Legacy {
    fn mutate(ctx: TaskContext, pod_json: String) -> Result<String, Error> {
        let mut pod: serde_json::Value =
            serde_json::from_str(&pod_json).map_err(|e| Error::InvalidInput(e.to_string()))?;
        let labels = pod
            .pointer_mut("/metadata/labels")
            .and_then(|l| l.as_object_mut())
            .ok_or_else(|| Error::InvalidInput("a pod without labels".into()))?;
        labels.insert(
            "legacy-mutator".into(),
            format!("{}-{}", ctx.task_type, ctx.rank).into(),
        );
        Ok(pod.to_string())
    }
}

export!(Legacy);
