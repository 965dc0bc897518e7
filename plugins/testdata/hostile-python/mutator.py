"""Test-only mutator that breaks the operator's rules when its config says so; the Python twin
of plugins/testdata/hostile-mutator (Rust). The config is a comma-separated list of modes, all
applied; a list starting with `later:` applies only to pods of rank 1 and above (the operator's
load-time smoke call uses rank 0). It always adds the label `hostile.test/seen: "yes"`. Modes:
`rename`, `namespace`, `drop-rank`, `label` (rewrites `diengine/job`), `privileged`,
`host-path`, `host-network`, `loop`, `oom`, `error`, `garbage` (an answer that is not JSON).
"""

from diorch_plugin import InvalidInput, Pod, mutator


class _NotJson(Pod):
    def to_json(self):
        return "{not json"


def mutate(ctx, pod):
    pod.set_label("hostile.test/seen", "yes")
    modes = ctx.config.strip()
    if modes.startswith("later:"):
        if ctx.rank == 0:
            return None
        modes = modes[len("later:"):]
    spec = pod.value.setdefault("spec", {})
    for mode in filter(None, (m.strip() for m in modes.split(","))):
        if mode == "rename":
            pod.set_name("renamed")
        elif mode == "namespace":
            pod.value.setdefault("metadata", {})["namespace"] = "elsewhere"
        elif mode == "drop-rank":
            pod.remove_env("DI_RANK")
        elif mode == "label":
            pod.set_label("diengine/job", "other")
        elif mode == "privileged":
            spec["containers"][0].setdefault("securityContext", {})["privileged"] = True
        elif mode == "host-path":
            spec.setdefault("volumes", []).append({"name": "host-root", "hostPath": {"path": "/"}})
        elif mode == "host-network":
            spec["hostNetwork"] = True
        elif mode == "loop":
            while True:
                pass
        elif mode == "oom":
            block = bytearray(1 << 30)
            block[-1] = 1
        elif mode == "error":
            raise InvalidInput("hostile mutator refuses on purpose")
        elif mode == "garbage":
            return _NotJson(pod.value)
    return None


WitWorld = mutator(mutate)
