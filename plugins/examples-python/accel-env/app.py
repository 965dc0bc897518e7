"""Mutator: accelerator and collective-communication env (NCCL) for learner pods.

Config (JSON, every field optional): {"taskTypes": ["learner"], "interface": "eth0",
"rdma": false, "debug": "WARN", "env": {"NAME": "value"}}. Env goes into `di-container` (all
containers if none has that name); names starting with `DI_` are refused, they belong to the
operator. The same pods as diorch's Rust `accel-env` example.
"""

import json

from diorch_plugin import InvalidInput, log, mutator


def env_for(ctx):
    """The env to set for `ctx`: (name, value) pairs; none when the task type is not targeted."""
    if not ctx.config.strip():
        config = {}
    else:
        try:
            config = json.loads(ctx.config)
        except ValueError as e:
            raise InvalidInput(f"config is not JSON: {e}") from None
    # A config that is JSON but not an object configures nothing (every field has a default).
    if not isinstance(config, dict):
        config = {}

    def get_str(key, default):
        if key not in config:
            return default
        if not isinstance(config[key], str):
            raise InvalidInput(f'config "{key}" must be a string')
        return config[key]

    if "taskTypes" not in config:
        targeted = ctx.task_type == "learner"
    elif isinstance(config["taskTypes"], list):
        targeted = ctx.task_type in [t for t in config["taskTypes"] if isinstance(t, str)]
    else:
        raise InvalidInput('config "taskTypes" must be a list')
    if not targeted:
        return []
    rdma = config.get("rdma", False)
    if not isinstance(rdma, bool):
        raise InvalidInput('config "rdma" must be a boolean')
    env = [
        ("NCCL_SOCKET_IFNAME", get_str("interface", "eth0")),
        ("NCCL_IB_DISABLE", "0" if rdma else "1"),
        ("NCCL_DEBUG", get_str("debug", "WARN")),
        ("NCCL_ASYNC_ERROR_HANDLING", "1"),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        # The learner's place among the job's replicas, for frameworks that read torch-style env.
        ("LOCAL_RANK", "0"),
        ("LEARNER_RANK", str(ctx.task_rank)),
    ]
    if "env" in config:
        extra = config["env"]
        if not isinstance(extra, dict):
            raise InvalidInput('config "env" must be an object')
        # Sorted, as the Rust example applies them (its JSON objects iterate in key order).
        for k in sorted(extra):
            if k.startswith("DI_"):
                raise InvalidInput(f"env {k} belongs to the operator")
            if not isinstance(extra[k], str):
                raise InvalidInput(f"env {k} must be a string")
            env.append((k, extra[k]))
    return env


def mutate(ctx, pod):
    env = env_for(ctx)
    if not env:
        return
    target = "di-container" if "di-container" in pod.container_names else None
    for k, v in env:
        pod.set_env(target, k, v)
    log.debug("accelerator env set", job=ctx.job_key, task=ctx.task_name)


WitWorld = mutator(mutate)
