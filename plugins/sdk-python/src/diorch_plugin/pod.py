"""Typed helpers over the pod (a `v1.Pod` as JSON) a mutator receives.

Owns: the `Pod` editing helpers and parsing/serialising the pod text. Must not touch: what the
host allows a mutator to change (the host compares the result with the original pod and refuses
edits of names, owner references, `diengine/*` metadata, `DI_*` env and the capabilities the
plugin's ConfigMap did not grant).

Edits create missing intermediate objects, and behave as the Rust SDK's `Pod` does, so a mutator
gives the same pod in either language.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional

from .errors import InvalidInput


def _object(parent: Any, key: str) -> dict:
    """`parent[key]` as an object, replacing a missing or non-object value with `{}`."""
    v = parent.get(key)
    if not isinstance(v, dict):
        v = parent[key] = {}
    return v


def _array(parent: dict, key: str) -> list:
    v = parent.get(key)
    if not isinstance(v, list):
        v = parent[key] = []
    return v


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class Pod:
    """A pod as JSON. `value` is the raw document (a dict) for edits the helpers do not cover."""

    __slots__ = ("value",)

    def __init__(self, value: dict):
        self.value = value

    @staticmethod
    def parse(text: str) -> "Pod":
        try:
            # NaN and Infinity are not JSON (the host's parser refuses them too).
            v = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as e:
            raise InvalidInput(f"pod is not JSON: {e}") from None
        if not isinstance(v, dict):
            raise InvalidInput("pod is not a JSON object")
        return Pod(v)

    def to_json(self) -> str:
        return json.dumps(self.value, separators=(",", ":"), ensure_ascii=False)

    @property
    def name(self) -> Optional[str]:
        v = self.value.get("metadata")
        v = v.get("name") if isinstance(v, dict) else None
        return v if isinstance(v, str) else None

    def set_name(self, name: str) -> None:
        _object(self.value, "metadata")["name"] = name

    def _get(self, *path) -> Any:
        v: Any = self.value
        for p in path:
            if not isinstance(v, dict):
                return None
            v = v.get(p)
        return v

    def label(self, key: str) -> Optional[str]:
        v = self._get("metadata", "labels", key)
        return v if isinstance(v, str) else None

    def set_label(self, key: str, value: str) -> None:
        _object(_object(self.value, "metadata"), "labels")[key] = value

    def annotation(self, key: str) -> Optional[str]:
        v = self._get("metadata", "annotations", key)
        return v if isinstance(v, str) else None

    def set_annotation(self, key: str, value: str) -> None:
        _object(_object(self.value, "metadata"), "annotations")[key] = value

    def node_selector(self, key: str) -> Optional[str]:
        v = self._get("spec", "nodeSelector", key)
        return v if isinstance(v, str) else None

    def set_node_selector(self, key: str, value: str) -> None:
        _object(_object(self.value, "spec"), "nodeSelector")[key] = value

    def add_toleration(self, toleration: dict) -> None:
        """Adds a toleration (a `v1.Toleration` object) unless an equal one is there."""
        tolerations = _array(_object(self.value, "spec"), "tolerations")
        if toleration not in tolerations:
            tolerations.append(toleration)

    @property
    def tolerations(self) -> List[Any]:
        v = self._get("spec", "tolerations")
        return v if isinstance(v, list) else []

    @property
    def container_names(self) -> List[str]:
        """Names of `spec.containers`, in order."""
        cs = self._get("spec", "containers")
        if not isinstance(cs, list):
            return []
        return [c["name"] for c in cs if isinstance(c, dict) and isinstance(c.get("name"), str)]

    def _containers(self, container: Optional[str]):
        cs = _array(_object(self.value, "spec"), "containers")
        for i, c in enumerate(cs):
            if container is not None and not (isinstance(c, dict) and c.get("name") == container):
                continue
            if not isinstance(c, dict):
                c = cs[i] = {}
            yield c

    def set_env(self, container: Optional[str], name: str, value: str) -> int:
        """Sets env var `name` in `container` (every container when None), replacing an existing
        entry; returns how many containers were changed."""
        changed = 0
        for c in self._containers(container):
            env = _array(c, "env")
            entry = {"name": name, "value": value}
            for i, e in enumerate(env):
                if isinstance(e, dict) and e.get("name") == name:
                    env[i] = entry
                    break
            else:
                env.append(entry)
            changed += 1
        return changed

    def remove_env(self, name: str) -> None:
        """Removes env var `name` from every container."""
        for c in self._containers(None):
            env = _array(c, "env")
            env[:] = [e for e in env if not (isinstance(e, dict) and e.get("name") == name)]

    def env(self, container: str, name: str) -> Optional[str]:
        """The plain value of env var `name` in `container`."""
        cs = self._get("spec", "containers")
        for c in cs if isinstance(cs, list) else []:
            if isinstance(c, dict) and c.get("name") == container:
                env = c.get("env")
                for e in env if isinstance(env, list) else []:
                    if isinstance(e, dict) and e.get("name") == name:
                        v = e.get("value")
                        return v if isinstance(v, str) else None
                return None
        return None
