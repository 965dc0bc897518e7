"""Structured logging from a plugin: routed to the operator's log with the plugin's name.

Owns: `trace`/`debug`/`info`/`warn`/`error`. Must not touch: the caps (the host bounds the number
and size of lines per call and drops the rest). Outside a component (tests on CPython) lines go
to Python's `logging` under the logger `diorch_plugin`.

    log.info("placed", job=job.key, nodes=3)
"""

from __future__ import annotations

import logging as _logging

try:  # Inside a component: the contract's log import.
    from wit_world.imports import log as _wit_log  # type: ignore[import-not-found]

    _LEVELS = {
        "trace": _wit_log.Level.TRACE,
        "debug": _wit_log.Level.DEBUG,
        "info": _wit_log.Level.INFO,
        "warn": _wit_log.Level.WARN,
        "error": _wit_log.Level.ERROR,
    }

    def _emit(level: str, message: str, fields: dict) -> None:
        _wit_log.log(_LEVELS[level], str(message), [(str(k), str(v)) for k, v in fields.items()])

except ImportError:  # On CPython: the standard library's logging.
    _logger = _logging.getLogger("diorch_plugin")
    _PY_LEVELS = {"trace": 5, "debug": 10, "info": 20, "warn": 30, "error": 40}

    def _emit(level: str, message: str, fields: dict) -> None:
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        _logger.log(_PY_LEVELS[level], "%s%s", message, f" {extra}" if extra else "")


def trace(message: str, **fields) -> None:
    _emit("trace", message, fields)


def debug(message: str, **fields) -> None:
    _emit("debug", message, fields)


def info(message: str, **fields) -> None:
    _emit("info", message, fields)


def warn(message: str, **fields) -> None:
    _emit("warn", message, fields)


def error(message: str, **fields) -> None:
    _emit("error", message, fields)
