"""Refusals a plugin raises; the SDK maps each to the contract's `error` variant.

Owns: the exception types and their mapping to variant names. Must not touch: the generated
bindings (the world glue in `_world.py` builds the variant values).
"""


class PluginError(Exception):
    """Base of the refusals the host understands. Raise a subclass; any other exception a
    plugin lets escape is reported to the host as `internal` with its message."""

    variant = "internal"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NoFit(PluginError):
    """The job does not fit on the given nodes (the host applies its failure policy)."""

    variant = "no-fit"


class InvalidInput(PluginError):
    """The input makes no sense to the plugin (e.g. a pod without containers)."""

    variant = "invalid-input"


class Internal(PluginError):
    """Anything else."""

    variant = "internal"
