"""Model shapes and exact parameter counts, read from Hugging Face ``config.json`` files.

Counted analytically, term by term, with the per-layer breakdown the parallelism formulas need (``ModelSpec.layers``,
one ``LayerSpec`` per decoder layer), for these ``model_type`` s (``FAMILIES``; the readers are in
``meshplan/spec/models/``): ``llama``, ``mistral``, ``mixtral``, ``phi3``, ``olmo2``, ``qwen2``, ``qwen2_moe``,
``qwen3``, ``qwen3_moe``, ``qwen3_5``, ``qwen3_5_moe``, ``gemma2``, ``gemma3_text``, ``gemma3``,
``deepseek_v2``, ``deepseek_v3``, ``gpt2`` (plus the course's ``bias``/``norm`` GPT variants).

Every count is an exact integer: the tests build each family with ``transformers`` (pinned 5.23.0) on the meta
device and compare the totals to the parameter, and compare the shipped models to published checkpoint totals
(``tests/test_params.py``, ``shared/reference/param-counts.md``). Sliding windows, q/k norms, biases, tied
embeddings, shared experts, dense-first layers and the like are read from the config, never assumed; a key that
changes the count but that a family does not have (experts in a config labelled ``llama``) is refused by name.

Any other ``model_type`` that the installed ``transformers`` knows is counted exactly from a meta-device model,
with the terms it cannot read off exactly named in ``ModelSpec.estimated``; ``torch`` and ``transformers`` are
imported only then.

Example:
    >>> m = load_model("qwen3.8-27b")
    >>> m.params.total
    27781427952
    >>> m.params.components["vision"]
    460730096
    >>> m.layers[3].mixer, m.layers[0].mixer
    ('attention', 'linear_attention')
"""

from __future__ import annotations

import errno
import json
from collections.abc import Mapping
from pathlib import Path

from meshplan.core.resources import DATA_DIR
from meshplan.core.validation import ConfigError
from meshplan.spec.models import FAMILIES, from_config
from meshplan.spec.models.fields import show
from meshplan.spec.models.spec import COMPONENT_KEYS, LayerSpec, ModelSpec, ParamCount

MODELS_DIR = DATA_DIR / "models"
MAX_CONFIG_BYTES = 8 * 2**20  # a config.json is a few kB; anything this large is not one

__all__ = [
    "COMPONENT_KEYS",
    "FAMILIES",
    "MODELS_DIR",
    "LayerSpec",
    "ModelSpec",
    "ParamCount",
    "available_models",
    "load_model",
    "model_from_config",
]


def model_from_config(cfg: Mapping, name: str = "custom", where: str | None = None) -> ModelSpec:
    """Build a ``ModelSpec`` from a parsed Hugging Face ``config.json`` (a dict).

    Raises ValueError naming the bad key and the file (``where``), or the unsupported ``model_type``.
    """
    return from_config(cfg, name, where or f"'{name}'")


def available_models() -> list[str]:
    """File stems of the model configs shipped in ``data/models/``."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def _written_as_path(text: str) -> bool:
    """Whether ``text`` can only be a path: absolute, or starting with ``.`` (``./qwen3-8b``, ``../m``, ``.m``)."""
    return text.startswith(".") or Path(text).is_absolute()


def _resolve(text: str) -> Path:
    """The config file a model name or path designates (a directory means its config.json): see ``load_model``."""
    try:
        path = Path(text)
        shipped = MODELS_DIR / f"{text}.json"  # a stem, or a stem under a folder of data/models/ ("public/gpt2")
        if not _written_as_path(text) and shipped.is_file() and MODELS_DIR.resolve() in shipped.resolve().parents:
            if path.exists():
                what = "folder" if path.is_dir() else "file"
                raise ConfigError(  # text is a shipped stem: printable as it is
                    f"model '{text}' is ambiguous: both a shipped model and the {what} {text} here; "
                    f"write ./{text} for the {what}, or {shipped} for the shipped model",
                    "model",
                )
            return shipped
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise ConfigError(f"model directory {text!r} has no config.json", "model")
            return path / "config.json"
        if path.is_file():
            return path
    except OSError as exc:
        why = "is longer than the file system allows" if exc.errno == errno.ENAMETOOLONG else f"cannot be read ({exc})"
        raise ConfigError(f"model name or path {show(text)} {why}", "model") from None
    except ConfigError:
        raise
    except ValueError as exc:  # e.g. a NUL byte in the path
        raise ConfigError(f"model name or path {show(text)} is not a valid path ({exc})", "model") from None
    raise ConfigError(f"unknown model {show(text)}: not a file and not one of {', '.join(available_models())}", "model")


def load_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """Load a model by file stem in ``data/models/`` (e.g. ``"qwen3.8-27b"``, or ``"public/mixtral-8x7b-v0.1"`` for
    the per-family configs the tests check against transformers), by path to a config.json, or by a Hugging Face
    model directory holding one.

    A name written as a path (absolute, or starting with ``.``: ``./qwen3-8b``, the folder ``huggingface-cli download
    --local-dir`` makes) is always that file or folder, never a shipped model. A bare name that is both a shipped stem
    and an existing file or folder of the working directory is refused as ambiguous (ConfigError saying how to write
    either), so that one command line never means two models depending on where it runs.

    Raises ConfigError (a ValueError) for an unknown name, an unreadable, binary, oversized or too deeply nested
    file, invalid JSON or a malformed config, naming the file.
    """
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    if not isinstance(name_or_path, (str, Path)):
        raise ConfigError(f"model must be a name, a path or a ModelSpec, got {show(name_or_path)}", "model")
    path = _resolve(str(name_or_path))
    try:
        stat = path.stat()
    except OSError as exc:
        raise ConfigError(f"cannot read model config {str(path)!r}: {exc.strerror or exc}", "model") from None
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    cached = _CACHE.get(key)
    if cached is None:
        cached = _load(path)
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = cached
    return cached


# ModelSpec is frozen: a config read once (same file, same modification time and size) is shared
_CACHE: dict[tuple[str, int, int], ModelSpec] = {}


def _load(path: Path) -> ModelSpec:
    where = repr(str(path))
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"cannot read model config {where}: {path.stat().st_size:,} bytes is not a config.json "
                f"(at most {MAX_CONFIG_BYTES:,})"
            )
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read model config {where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read model config {where}: not UTF-8 text (a binary file?)") from None
    except RecursionError:
        raise ConfigError(f"malformed config {where}: JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"malformed config {where}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    except ConfigError:
        raise
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"malformed config {where}: invalid JSON ({exc})") from None
    stem = path.stem if path.name != "config.json" else path.parent.name or "config"
    return model_from_config(cfg, name=stem, where=where)
