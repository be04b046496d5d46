"""The one place each shared rule on an input is written, and the errors a bad input raises.

Errors: a ``MeshplanError`` is a ``ValueError`` (so ``except ValueError`` still catches it) whose message is one line
naming the value; ``factor`` names the setting to blame, when there is one. The subclasses tell a caller what went
wrong without reading the message:

* ``PlanError``: a plan, or one of its parts (the mesh shape, the workload, the nodes), that cannot be built;
* ``LedgerError``: a ``PlanError`` the ledger's engine adds (DeepSpeed refuses ZeRO-2/3 with pipeline parallelism);
* ``ConfigError``: a model config that cannot be read or does not say what it must.

The checks below raise ``MeshplanError`` unless the caller names another (``error=PlanError`` in a plan's parts).
Modules not yet moved to these types (the mesh's queries, the hardware files, the schedules) raise plain
``ValueError``s; the messages are the same either way.

Checks: ``check_count`` (a positive integer, at most a limit), ``check_choice`` (one of some names), ``check_zero``
(a ZeRO stage), ``check_non_negative_int`` (an integer ≥ 0), ``check_non_negative`` (a finite number ≥ 0) and
``check_positive`` (a finite number > 0). ``is_count`` is ``check_count``'s rule as a test, for a derivation that
needs a count before the part that owns it can say what is wrong (``ParallelDims.from_gpus`` deriving dp).

    >>> check_count("tp", 8)
    8
    >>> check_count("tp", 0, error=PlanError)
    Traceback (most recent call last):
    ...
    meshplan.core.validation.PlanError: tp=0 must be a positive integer
    >>> try:
    ...     check_zero(4, error=PlanError)
    ... except ValueError as exc:
    ...     print(type(exc).__name__, exc.factor, str(exc))
    PlanError zero zero=4 must be 0, 1, 2 or 3
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "ZERO_STAGES",
    "ConfigError",
    "LedgerError",
    "MeshplanError",
    "PlanError",
    "check_choice",
    "check_count",
    "check_non_negative",
    "check_non_negative_int",
    "check_positive",
    "check_zero",
    "is_count",
]

ZERO_STAGES = (0, 1, 2, 3)


class MeshplanError(ValueError):
    """A bad input: one line naming the value; ``factor`` names the setting to blame (``"tp"``, ``"global_batch"``),
    or is None."""

    def __init__(self, message: str, factor: str | None = None) -> None:
        super().__init__(message)
        self.factor = factor


class PlanError(MeshplanError):
    """A plan that cannot be built: its mesh shape, workload, nodes or the way its parts combine break a rule;
    ``factor`` names the setting (``"pp"`` when pp does not divide the layers)."""


class LedgerError(PlanError):
    """The ledger's engine refuses a setting (``factor``) that the plan's rules allow."""


class ConfigError(MeshplanError):
    """A model config or data file that cannot be read, or that does not say what it must."""


def is_count(value: Any, limit: int | None = None) -> bool:
    """Whether ``value`` is a positive integer (not a bool), at most ``limit``: ``check_count``'s rule."""
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1 and (limit is None or value <= limit)


def check_count(name: str, value: Any, limit: int | None = None, error: type[MeshplanError] = MeshplanError) -> int:
    """``value`` if it is a positive integer (at most ``limit``), else ``error`` naming it (its ``factor``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"{name}={value!r} must be a positive integer", name)
    if limit is not None and value > limit:
        raise error(f"{name}={value:,} is more than the {limit:,} this library plans for", name)
    return value


def check_choice(name: str, value: Any, choices: tuple[str, ...], error: type[MeshplanError] = MeshplanError) -> str:
    """``value`` if it is one of ``choices``, else ``error`` naming it: "recompute='x' must be one of none, ..."."""
    if value not in choices:
        raise error(f"{name}={value!r} must be one of {', '.join(choices)}", name)
    return value


def check_zero(value: Any, error: type[MeshplanError] = MeshplanError) -> int:
    """``value`` if it is a ZeRO stage (the integer 0, 1, 2 or 3), else ``error`` naming ``zero``."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in ZERO_STAGES:
        raise error(f"zero={value!r} must be 0, 1, 2 or 3", "zero")
    return value


def check_non_negative_int(name: str, value: Any) -> int:
    """``value`` if it is an integer ≥ 0 (not a bool), else MeshplanError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MeshplanError(f"{name}={value!r} must be a non-negative integer", name)
    return value


def check_non_negative(name: str, value: Any) -> float:
    """``value`` if it is a finite number ≥ 0 (not a bool), else MeshplanError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise MeshplanError(f"{name}={value!r} must be a non-negative number", name)
    return value


def check_positive(name: str, value: Any) -> float:
    """``value`` if it is a finite number > 0 (not a bool), else MeshplanError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise MeshplanError(f"{name}={value!r} must be a positive number", name)
    return value
