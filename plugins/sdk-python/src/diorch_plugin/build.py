"""`diorch-plugin build`: a plugin's Python module to a Wasm component, in one command.

Owns: the build command line and the pinned componentize-py invocation. Must not touch: the
SDK's runtime modules (they are copied into the build as they are).

    diorch-plugin build --world policy app.py -o policy.wasm
    diorch-plugin build --world mutator app.py -o mutator.wasm

The module must define `WitWorld = policy(...)` or `WitWorld = mutator(...)`. The build copies
the module, the other `.py` files beside it (not `test_*.py`) and this SDK into a clean folder,
so nothing else on your machine ends up in the component, and passes `--stub-wasi`: the
component then imports only `diorch:plugins` interfaces (the host grants nothing else; a call
that reaches for a file, a clock or a socket traps inside the plugin's own call).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The world names of the contract, by the short names the command takes.
WORLDS = {"policy": "scheduling-policy", "mutator": "pod-mutator"}
#: The componentize-py this SDK is tested with (also the package's pinned dependency).
COMPONENTIZE_PY = "0.25.1"

SDK_DIR = Path(__file__).resolve().parent
WIT = SDK_DIR / "wit" / "plugins.wit"


def componentize_py() -> list:
    """The componentize-py command of this Python environment."""
    exe = Path(sys.executable).with_name("componentize-py")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("componentize-py")
    if found:
        return [found]
    raise SystemExit(
        f"componentize-py is not installed: pip install componentize-py=={COMPONENTIZE_PY} "
        "(a dependency of this package)"
    )


def build(entry: Path, world: str, out: Path, extra_paths=()) -> None:
    entry = entry.resolve()
    if entry.suffix != ".py" or not entry.is_file():
        raise SystemExit(f"{entry}: not a Python file")
    with tempfile.TemporaryDirectory(prefix="diorch-plugin-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for f in entry.parent.glob("*.py"):
            if not f.name.startswith("test_"):
                shutil.copy2(f, src / f.name)
        shutil.copytree(
            SDK_DIR,
            src / "diorch_plugin",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "build.py", "testing.py"),
        )
        cmd = componentize_py() + [
            "-d",
            str(WIT),
            "-w",
            WORLDS[world],
            "componentize",
            entry.stem,
            "-p",
            str(src),
            *[a for p in extra_paths for a in ("-p", str(Path(p).resolve()))],
            "--stub-wasi",
            "-o",
            str(out.resolve()),
        ]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        subprocess.run(cmd, check=True, cwd=tmp, env=env)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="diorch-plugin", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a policy or mutator module into a Wasm component")
    b.add_argument("entry", type=Path, help="the module defining WitWorld (e.g. app.py)")
    b.add_argument("--world", choices=sorted(WORLDS), required=True)
    b.add_argument("-o", "--output", type=Path, required=True)
    b.add_argument("-p", "--path", action="append", default=[], help="another folder of modules to include")
    args = parser.parse_args(argv)
    try:
        build(args.entry, args.world, args.output, args.path)
    except subprocess.CalledProcessError as e:
        print(f"error: componentize-py failed (exit {e.returncode})", file=sys.stderr)
        return 1
    size = args.output.stat().st_size
    print(f"{args.output}: {size / (1 << 20):.1f} MiB ({WORLDS[args.world]} world)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
