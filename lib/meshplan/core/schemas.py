"""The shape of the library's JSON data files, as JSON Schemas (``data/schemas/<name>.schema.json``, Draft 2020-12),
checked with ``jsonschema``; and ``show``, how an error prints a value.

``check`` raises one ``ValueError`` line naming the file and the field (dotted, with list indices: ``runs[3].mesh``)
and showing the value. What a field must be is the ``x-expected`` phrase of its schema (an annotation: validators
ignore keywords they do not know); a constraint without one falls back to jsonschema's own sentence.

    >>> check({"gpus_per_node": {"value": "8", "source": "datasheet"}}, "hardware", "malformed hardware file 'hw.json'")
    Traceback (most recent call last):
    ...
    ValueError: malformed hardware file 'hw.json': missing 'gpu_memory_bytes'
    >>> figure = {"value": 1e9, "source": "datasheet"}
    >>> hw = dict.fromkeys(("gpu_memory_bytes", "nvlink_bytes_per_s", "infiniband_bytes_per_s"), figure)
    >>> check({**hw, "gpus_per_node": {"value": "8", "source": "x"}}, "hardware", "malformed hardware file 'hw.json'")
    Traceback (most recent call last):
    ...
    ValueError: malformed hardware file 'hw.json': 'gpus_per_node.value' must be a positive integer, got '8'
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from meshplan.core.resources import read_json

__all__ = ["check", "field_name", "schema", "show"]


def show(value: Any) -> str:
    """``repr(value)`` cut to one short line (a 400-digit integer is shown by its size, not its digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # nested too deeply, or an integer beyond Python's str() limit
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= 60 else text[:50] + f"... ({len(text):,} characters)"


def field_name(path: Iterable[str | int]) -> str:
    """A JSON path as the errors print it: ``("runs", 3, "mesh", "tp")`` → ``runs[3].mesh.tp``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@cache
def schema(name: str) -> dict:
    """The schema ``data/schemas/<name>.schema.json`` (checked against the Draft 2020-12 metaschema once)."""
    # imported where a data file is checked, not with the library (jsonschema ships no type hints)
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

    s = read_json("schemas", f"{name}.schema.json")
    Draft202012Validator.check_schema(s)
    return s


@cache
def _validator(name: str) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema(name))


def _describe(error: Any) -> str:
    """One error of jsonschema as the library's errors read: what is missing, or which field must be what."""
    path = list(error.absolute_path)
    if error.validator == "required":
        missing = next(k for k in error.validator_value if k not in error.instance)
        return f"missing '{field_name([*path, missing])}'"
    if error.validator == "additionalProperties" and error.validator_value is False:
        allowed = error.schema.get("properties", {})
        extra = sorted(k for k in error.instance if k not in allowed)
        names = ", ".join(f"'{field_name([*path, k])}'" for k in extra[:3]) + (", ..." if extra[3:] else "")
        return f"unexpected key {names} (the keys are {', '.join(allowed)})"
    expected = error.schema.get("x-expected")
    if expected is None:
        return f"'{field_name(path)}': {error.message}" if path else error.message
    field = f"'{field_name(path)}'" if path else "the file"
    return f"{field} must be {expected}, got {show(error.instance)}"


def check(data: Any, name: str, where: str) -> None:
    """ValueError ``"{where}: {what is wrong}"`` unless ``data`` (a parsed JSON file) is valid under the schema
    ``name``. Of several errors the least deeply nested is reported (a missing key before a bad value inside another
    field), the first in the schema's order among equals; an ``anyOf`` is reported as a whole, by its
    ``x-expected``."""
    errors = list(_validator(name).iter_errors(data))
    if errors:
        raise ValueError(f"{where}: {_describe(min(errors, key=lambda e: len(e.absolute_path)))}")
