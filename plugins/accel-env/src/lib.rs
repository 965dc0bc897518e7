//! Mutator plugin: accelerator and collective-communication env (NCCL) for learner pods.
//!
//! Config (JSON, every field optional): `{"taskTypes": ["learner"], "interface": "eth0",
//! "rdma": false, "debug": "WARN", "env": {"NAME": "value"}}`. Env goes into `di-container` (all
//! containers if none has that name); names starting with `DI_` are refused, they belong to the
//! operator.

use diorch_plugin_sdk::{Mutator, PluginError, Pod, TaskContext};
use serde_json::Value;

pub struct AccelEnv;

/// The env to set for `ctx`, or none when the task type is not targeted.
pub fn env_for(ctx: &TaskContext) -> Result<Vec<(String, String)>, PluginError> {
    let config: Value = if ctx.config.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_str(&ctx.config)
            .map_err(|e| PluginError::InvalidInput(format!("config is not JSON: {e}")))?
    };
    let get_str = |k: &str, default: &str| -> Result<String, PluginError> {
        match config.get(k) {
            None => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(PluginError::InvalidInput(format!(
                "config {k:?} must be a string"
            ))),
        }
    };
    let targeted = match config.get("taskTypes") {
        None => ctx.task_type == "learner",
        Some(Value::Array(types)) => types.iter().any(|t| t.as_str() == Some(&ctx.task_type)),
        Some(_) => {
            return Err(PluginError::InvalidInput(
                "config \"taskTypes\" must be a list".into(),
            ));
        }
    };
    if !targeted {
        return Ok(vec![]);
    }
    let rdma = match config.get("rdma") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(PluginError::InvalidInput(
                "config \"rdma\" must be a boolean".into(),
            ));
        }
    };
    let mut env = vec![
        (
            "NCCL_SOCKET_IFNAME".to_string(),
            get_str("interface", "eth0")?,
        ),
        (
            "NCCL_IB_DISABLE".to_string(),
            if rdma { "0" } else { "1" }.to_string(),
        ),
        ("NCCL_DEBUG".to_string(), get_str("debug", "WARN")?),
        ("NCCL_ASYNC_ERROR_HANDLING".to_string(), "1".to_string()),
        ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
        // The learner's place among the job's replicas, for frameworks that read torch-style env.
        ("LOCAL_RANK".to_string(), "0".to_string()),
        ("LEARNER_RANK".to_string(), ctx.task_rank.to_string()),
    ];
    if let Some(extra) = config.get("env") {
        let extra = extra
            .as_object()
            .ok_or_else(|| PluginError::InvalidInput("config \"env\" must be an object".into()))?;
        for (k, v) in extra {
            if k.starts_with("DI_") {
                return Err(PluginError::InvalidInput(format!(
                    "env {k} belongs to the operator"
                )));
            }
            let v = v
                .as_str()
                .ok_or_else(|| PluginError::InvalidInput(format!("env {k} must be a string")))?;
            env.push((k.clone(), v.to_string()));
        }
    }
    Ok(env)
}

impl Mutator for AccelEnv {
    fn mutate(ctx: &TaskContext, pod: &mut Pod) -> Result<(), PluginError> {
        let env = env_for(ctx)?;
        if env.is_empty() {
            return Ok(());
        }
        let target = pod
            .container_names()
            .contains(&"di-container")
            .then_some("di-container");
        for (k, v) in &env {
            pod.set_env(target, k, v);
        }
        diorch_plugin_sdk::log::debug(
            "accelerator env set",
            &[("job", &ctx.job_key), ("task", &ctx.task_name)],
        );
        Ok(())
    }
}

diorch_plugin_sdk::export_mutator!(AccelEnv);

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(task_type: &str, config: &str) -> TaskContext {
        TaskContext {
            job_key: "ns/j".into(),
            task_name: task_type.into(),
            task_type: task_type.into(),
            rank: 1,
            task_rank: 1,
            world_size: 3,
            node: Some("n1".into()),
            job_labels: vec![],
            job_annotations: vec![],
            config: config.into(),
        }
    }

    const POD: &str = r#"{"metadata":{"name":"p"},"spec":{"containers":[
        {"name":"side"},{"name":"di-container","env":[{"name":"DI_RANK","value":"1"}]}]}}"#;

    #[test]
    fn learners_get_nccl_env_in_di_container_only() {
        let mut pod = Pod::parse(POD).unwrap();
        AccelEnv::mutate(
            &ctx(
                "learner",
                r#"{"interface":"ib0","rdma":true,"env":{"X":"y"}}"#,
            ),
            &mut pod,
        )
        .unwrap();
        assert_eq!(pod.env("di-container", "NCCL_SOCKET_IFNAME"), Some("ib0"));
        assert_eq!(pod.env("di-container", "NCCL_IB_DISABLE"), Some("0"));
        assert_eq!(pod.env("di-container", "LEARNER_RANK"), Some("1"));
        assert_eq!(pod.env("di-container", "X"), Some("y"));
        assert_eq!(pod.env("di-container", "DI_RANK"), Some("1"));
        assert_eq!(pod.env("side", "NCCL_DEBUG"), None);
    }

    #[test]
    fn other_task_types_are_untouched() {
        let mut pod = Pod::parse(POD).unwrap();
        let before = pod.clone();
        AccelEnv::mutate(&ctx("collector", ""), &mut pod).unwrap();
        assert_eq!(pod, before);
        AccelEnv::mutate(
            &ctx("collector", r#"{"taskTypes":["collector"]}"#),
            &mut pod,
        )
        .unwrap();
        assert_eq!(pod.env("di-container", "NCCL_IB_DISABLE"), Some("1"));
    }

    #[test]
    fn refuses_operator_env_and_bad_config() {
        let mut pod = Pod::parse(POD).unwrap();
        let err =
            AccelEnv::mutate(&ctx("learner", r#"{"env":{"DI_RANK":"0"}}"#), &mut pod).unwrap_err();
        assert!(err.to_string().contains("DI_RANK"));
        assert!(AccelEnv::mutate(&ctx("learner", r#"{"rdma":"yes"}"#), &mut pod).is_err());
        assert!(AccelEnv::mutate(&ctx("learner", "{"), &mut pod).is_err());
    }
}
