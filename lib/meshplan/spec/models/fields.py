"""Reading a ``config.json`` key by key, each value's JSON type and range checked.

Every error is one ``ConfigError`` (a ``ValueError``) line naming the file, the key (with its section, e.g.
``'text_config.hidden_size'``) and the value, abbreviated when huge:

    >>> Fields({"hidden_size": "4096"}, "'my.json'").integer("hidden_size")
    Traceback (most recent call last):
    ...
    meshplan.core.validation.ConfigError: malformed config 'my.json': 'hidden_size' must be a positive integer, ...
    >>> try:
    ...     Fields({"tie_word_embeddings": "false"}, "'my.json'").boolean("tie_word_embeddings", False)
    ... except ConfigError as exc:
    ...     print(exc)
    malformed config 'my.json': 'tie_word_embeddings' must be true or false, got 'false'

``Fields`` remembers which keys a family's loader read, so that a key which changes the parameter count but which
that loader does not understand (experts in a config labelled ``llama``) is refused by ``refuse_unread`` instead of
being silently ignored.

Not a JSON Schema or a pydantic model: what a config must hold depends on the family and on its other keys (a
``layer_types`` list as long as ``num_hidden_layers``, ``head_dim`` defaulting to hidden ÷ heads, ranges a loader
passes per key, sections read only when present), so a schema would be one per family plus these rules in code,
and its errors ("Input should be a valid integer [type=int_type, input_value='4096', input_type=str]") would need
translating back into the sentences above; nor can a schema say which keys a loader read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from meshplan.core.schemas import show  # how an error shows a value; spec.model and the readers import it from here
from meshplan.core.validation import ConfigError

MAX_INT = 2**40  # widths, vocabularies, ranks, expert counts: far above any model, far below float trouble
MAX_LAYERS = 2**16  # decoder layers, vision blocks: each becomes an entry of a tuple
_MISSING: Any = object()

# Keys that change the parameter count. A family's loader reads those its architecture has; any other one present
# with a value that is not null, 0, false or empty is refused by name (see ``Fields.refuse_unread``).
COUNT_KEYS = frozenset(
    {
        # experts
        "num_local_experts",
        "num_experts",
        "n_routed_experts",
        "moe_num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "expert_intermediate_size",
        "n_shared_experts",
        "num_shared_experts",
        "shared_expert_intermediate_size",
        "moe_shared_expert_intermediate_size",
        "shared_intermediate_size",
        "first_k_dense_replace",
        "moe_layer_freq",
        "decoder_sparse_step",
        "mlp_only_layers",
        # attention variants
        "attention_bias",
        "qkv_bias",
        "mlp_bias",
        "use_qkv_bias",
        "use_bias",
        "bias",
        "use_qk_norm",
        "qk_layernorm",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "attn_output_gate",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
        "add_cross_attention",
        # extra modules
        "num_nextn_predict_layers",
        "mtp_num_hidden_layers",
        "num_mtp_layers",
        "mtp_use_dedicated_embeddings",
        "vision_config",
        "audio_config",
        "text_config",
        "deepstack_visual_indexes",
    }
)


_EXPERT_COUNTS = {
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_num_experts",
    "n_shared_experts",
    "num_shared_experts",
    "vision_config",
    "text_config",
}


def _neutral(value: Any) -> bool:
    """A value that adds nothing to the count: null, 0, false, an empty list/object."""
    return value is None or value is False or value == 0 or (isinstance(value, (list, dict, str)) and not value)


class Fields:
    """One JSON object of a config (the file's top level, or a section such as ``text_config``), read by key."""

    def __init__(self, cfg: Mapping, where: str, prefix: str = ""):
        if not isinstance(cfg, Mapping):
            raise ConfigError(f"expected a JSON object, got {show(cfg)}")
        self.cfg, self.where, self.prefix = cfg, where, prefix
        self.read: set[str] = set()

    # ------------------------------------------------------------------ plumbing
    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"malformed config {self.where}: {message}")

    def has(self, key: str) -> bool:
        """The key is present with a non-null value (and counts as read)."""
        self.read.add(key)
        return self.cfg.get(key) is not None

    def _raw(self, key: str, default: Any) -> Any:
        self.read.add(key)
        if key not in self.cfg or (self.cfg[key] is None and default is not _MISSING):
            if default is _MISSING:
                raise self.error(f"missing key '{self.name(key)}'")
            return default
        return self.cfg[key]

    def _check_int(self, key: str, value: Any, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            kind = "a positive integer" if lo == 1 else f"an integer ≥ {lo}"
            raise self.error(f"'{self.name(key)}' must be {kind}, got {show(value)}")
        if value > hi:
            raise self.error(f"'{self.name(key)}' = {show(value)} is too large (at most {hi:,})")
        return value

    # ------------------------------------------------------------------ typed readers
    def integer(self, key: str, default: Any = _MISSING, lo: int = 1, hi: int = MAX_INT) -> int:
        """An integer in [lo, hi]; absent or null gives ``default`` (an error naming the key if there is none)."""
        value = self._raw(key, default)
        return value if value is default else self._check_int(key, value, lo, hi)

    def opt_integer(self, key: str, default: int | None = None, lo: int = 1, hi: int = MAX_INT) -> int | None:
        """An integer in [lo, hi], or None when the key is null; absent gives ``default``."""
        self.read.add(key)
        if key not in self.cfg:
            return default
        value = self.cfg[key]
        return None if value is None else self._check_int(key, value, lo, hi)

    def boolean(self, key: str, default: bool) -> bool:
        """A JSON boolean (``"false"``, 0 or null are errors, not a truth value); absent gives ``default``."""
        self.read.add(key)
        if key not in self.cfg:
            return default
        value = self.cfg[key]
        if not isinstance(value, bool):
            raise self.error(f"'{self.name(key)}' must be true or false, got {show(value)}")
        return value

    def number(self, key: str, default: float | None) -> float | None:
        """A finite positive number, or None when the key is null (softcapping caps); absent gives ``default``."""
        self.read.add(key)
        if key not in self.cfg:
            return default
        value = self.cfg[key]
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise self.error(f"'{self.name(key)}' must be a positive number or null, got {show(value)}")
        return float(value)

    def string(self, key: str, default: Any = _MISSING, choices: Iterable[str] | None = None) -> str:
        """A string (one of ``choices`` when given); absent or null gives ``default``."""
        value = self._raw(key, default)
        allowed = tuple(choices) if choices is not None else None
        if not isinstance(value, str) or len(value) > 200 or (allowed is not None and value not in allowed):
            want = f"one of {', '.join(repr(c) for c in allowed)}" if allowed else "a string"
            raise self.error(f"'{self.name(key)}' must be {want}, got {show(value)}")
        return value

    def integers(self, key: str, lo: int, hi: int) -> tuple[int, ...]:
        """A list of integers in [lo, hi] (absent or null: empty)."""
        value = self._raw(key, [])
        if not isinstance(value, list) or len(value) > MAX_LAYERS:
            raise self.error(f"'{self.name(key)}' must be a list of integers, got {show(value)}")
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int) or not lo <= item <= hi:
                raise self.error(f"'{self.name(key)}[{i}]' must be an integer from {lo} to {hi}, got {show(item)}")
        return tuple(value)

    def strings(self, key: str, length: int, choices: Iterable[str]) -> tuple[str, ...] | None:
        """A list of ``length`` strings, each one of ``choices``; None when absent or null."""
        self.read.add(key)
        value = self.cfg.get(key)
        if value is None:
            return None
        allowed = tuple(choices)
        if not isinstance(value, list) or len(value) != length:
            got = f"a list of {len(value)}" if isinstance(value, list) else show(value)
            raise self.error(f"'{self.name(key)}' must list {length} layer types (one per layer), got {got}")
        for i, item in enumerate(value):
            if not isinstance(item, str) or item not in allowed:
                raise self.error(
                    f"'{self.name(key)}[{i}]' must be one of {', '.join(repr(c) for c in allowed)}, got {show(item)}"
                )
        return tuple(value)

    def section(self, key: str) -> Fields:
        """The nested object under ``key`` (required) as its own ``Fields``."""
        sub = self.opt_section(key)
        if sub is None:
            raise self.error(f"missing key '{self.name(key)}'")
        return sub

    def opt_section(self, key: str) -> Fields | None:
        """The nested object under ``key`` as its own ``Fields``; None when absent or null."""
        self.read.add(key)
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.error(f"'{self.name(key)}' must be a JSON object, got {show(value)}")
        return Fields(value, self.where, self.name(key))

    # ------------------------------------------------------------------ keys not understood
    def refuse_unread(self, family: str) -> None:
        """Refuse a count-changing key this family's loader did not read (unless its value adds nothing).

        A MoE config relabelled ``llama`` keeps ``num_local_experts``: counting it as a llama would drop its
        experts (an 85 % undercount for Mixtral), so it is an error naming the key.
        """
        bad = [k for k in COUNT_KEYS - self.read if k in self.cfg and not _neutral(self.cfg[k])]
        if bad:
            bad.sort(key=lambda k: (k not in _EXPERT_COUNTS, k))
            keys = ", ".join(f"'{self.name(k)}' = {show(self.cfg[k])}" for k in bad[:4]) + (", ..." if bad[4:] else "")
            raise self.error(
                f"{keys} {'changes' if len(bad) == 1 else 'change'} the parameter count, but a '{family}' model has "
                f"no such part: check 'model_type' (a MoE or multimodal config relabelled '{family}' would be "
                f"undercounted) or remove {'it' if len(bad) == 1 else 'them'}"
            )
