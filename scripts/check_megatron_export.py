"""Check Megatron-LM exports with Megatron-LM's own code: its argument parser, ``validate_args``
(``megatron/training/arguments.py``) and the ``TransformerConfig`` it builds from them
(``core_transformer_config_from_args``), from a checkout of the pinned release (``data/engines/megatron-lm.json``).

Megatron-LM's ``megatron.training`` is not on PyPI (the ``megatron-core`` wheel holds ``megatron.core`` only), so
this is a script, not a test: CI checks the exports against the flags and start-up rules read from that file
(tests/test_export_megatron_rules.py); this script proves the data file right against the source itself.

    git clone https://github.com/NVIDIA/Megatron-LM && git -C Megatron-LM checkout core_v0.19.0
    .venv/bin/python scripts/check_megatron_export.py --megatron Megatron-LM --options   # the parser's flags
    .venv/bin/python scripts/check_megatron_export.py --megatron Megatron-LM             # the test plans' exports

What runs on a CPU-only machine with Python 3.11: the parser and ``validate_args`` with three stand-ins, each named
here: ``typing.override`` (Python 3.12) as the identity; ``megatron.core.transformer.moe.ops.paged_stash`` (it
imports triton at import time, which pretrain_gpt.py's flags never reach) as an empty module; and the GPU asked
for its compute capability answering Hopper's (9, 0), as an H100 would (``get_device_arch_version`` and
``torch.cuda.get_device_capability``). Each export is parsed with the environment its command sets (``VAR=value``
and ``env -u VAR``), ``WORLD_SIZE`` from its ``torchrun`` line, ``RANK`` 0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import os
import shlex
import sys
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUBS = ("megatron.core.transformer.moe.ops.paged_stash",)
# options TransformerConfig refuses without Transformer Engine (a CUDA package), switched off before it is built
TE_ONLY = ("apply_rope_fusion",)


class _Empty(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Empty(f"{self.__name__}.{name}")

    def __call__(self, *a, **k):
        return a[0] if a and callable(a[0]) and not k else self


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if any(name == s or name.startswith(s + ".") for s in STUBS):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Empty(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module) -> None:
        pass


def load_arguments(checkout: Path):
    """Megatron-LM's ``megatron.training.arguments`` from ``checkout``, with the stand-ins of the module docstring."""
    if not hasattr(typing, "override"):
        typing.override = lambda f: f  # type: ignore[attr-defined]
    sys.meta_path.insert(0, _StubFinder())
    sys.path.insert(0, str(checkout))
    import torch

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    import megatron.training.arguments as arguments  # type: ignore[import-not-found]  # the checkout, on the path

    arguments.get_device_arch_version = lambda: 9
    return arguments


def options(arguments) -> list[str]:
    """Every option string of the parser ``parse_args`` builds."""
    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    return sorted(k for k in parser._option_string_actions if k.startswith("--"))


def split_command(text: str) -> tuple[dict[str, str | None], list[str], list[str]]:
    """(environment it sets, None for a variable it unsets; torchrun argv; the script's flags) of an export."""
    body = " ".join(line.rstrip("\\") for line in text.splitlines() if not line.lstrip().startswith("#"))
    toks = shlex.split(body)
    env: dict[str, str | None] = {}
    while toks and (("=" in toks[0] and not toks[0].startswith("-")) or toks[0] == "env"):
        t = toks.pop(0)
        if t == "env":
            while toks and toks[0] == "-u":
                toks.pop(0)
                env[toks.pop(0)] = None
        else:
            k, v = t.split("=", 1)
            env[k] = v
    i = next(i for i, t in enumerate(toks) if t.endswith(".py"))
    return env, toks[:i], toks[i + 1 :]


def validate(arguments, text: str) -> str:
    """Parse ``text`` (an export) with Megatron-LM's parser and run ``validate_args``: '' or the failure."""
    env, run, flags = split_command(text)
    nodes = int(next(t for t in run if t.startswith("--nnodes=")).split("=")[1])
    per_node = int(next(t for t in run if t.startswith("--nproc_per_node=")).split("=")[1])
    saved = dict(os.environ)
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.environ.update(WORLD_SIZE=str(nodes * per_node), RANK="0", LOCAL_RANK="0")
        sys.argv = ["pretrain_gpt.py", *flags]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = arguments.parse_args()
            arguments.validate_args(args, {})
            for name in TE_ONLY:  # fused kernels of Transformer Engine, absent here (module docstring)
                setattr(args, name, False)
            arguments.core_transformer_config_from_args(args)  # TransformerConfig's own checks
    except (AssertionError, ValueError, SystemExit) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron", type=Path, required=True, help="a Megatron-LM checkout at the pinned release")
    ap.add_argument("--options", action="store_true", help="print the parser's option strings and stop")
    a = ap.parse_args()
    arguments = load_arguments(a.megatron.resolve())
    if a.options:
        print("\n".join(options(arguments)))
        return 0
    sys.path.insert(0, str(ROOT / "tests"))
    from export_plans import megatron_plans  # the plans tests/test_export_megatron_rules.py checks

    from meshplan.export import export_text

    failed = 0
    plans = megatron_plans()
    for name, plan in plans:
        why = validate(arguments, export_text(plan, "megatron"))
        failed += bool(why)
        print(f"{'FAIL' if why else 'ok  '} {name}" + (f": {why}" if why else ""))
    print(f"{len(plans) - failed} of {len(plans)} exports pass Megatron-LM's parse_args and validate_args")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
