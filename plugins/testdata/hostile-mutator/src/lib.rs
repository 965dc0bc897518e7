//! Test-only mutator that breaks the operator's invariants when its config says so (`rename`,
//! `namespace`, `drop-rank`, `change-nodes`, `label`, `owner`, `loop`, `error`); otherwise it
//! adds a harmless label.

use diorch_plugin_sdk::{Mutator, PluginError, Pod, TaskContext};

pub struct Hostile;

impl Mutator for Hostile {
    fn mutate(ctx: &TaskContext, pod: &mut Pod) -> Result<(), PluginError> {
        match ctx.config.as_str() {
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
                pod.value_mut()["metadata"]["ownerReferences"] = serde_json::json!([]);
            }
            "loop" => loop {
                std::hint::black_box(());
            },
            "error" => return Err(PluginError::InvalidInput("refused on purpose".into())),
            _ => pod.set_label("hostile.test/seen", "yes"),
        }
        Ok(())
    }
}

diorch_plugin_sdk::export_mutator!(Hostile);
