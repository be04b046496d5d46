"""The machine: one ``Hardware`` is the only source of GPU memory, GPUs per node, link bandwidths and compute.

Presets live in ``data/hardware/<name>.json`` (every field ``{"value": ..., "source": ...}``); the default is
``lab``, the lab page's machine: 80 GB GPUs, 8 per node, NVLink 160 GB/s and InfiniBand 50 GB/s per GPU
(DeepSeek-V3's effective figures on H800), 400 TFLOP/s effective bf16. Units: bytes, bytes per second, FLOP
per second. Bandwidths are per GPU and per direction.

    >>> hw = load_hardware()
    >>> hw.name, hw.nvlink_bytes_per_s / hw.infiniband_bytes_per_s
    ('lab', 3.2)
    >>> hw.with_overrides(gpu_memory_bytes=141e9).gpu_memory_bytes
    141000000000.0
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from meshplan.core.resources import DATA_DIR
from meshplan.core.schemas import check

HARDWARE_DIR = DATA_DIR / "hardware"
DEFAULT_HARDWARE = "lab"
# The step-time model's constants a hardware file may carry, fitted to the reader's own runs (``meshplan calibrate``),
# with the range each can physically take (the same as ``steptime.model.PHYSICAL_RANGES``, which a test holds equal)
CALIBRATION_RANGES = {"matmul_efficiency": (0.05, 1.0), "hbm_passes": (0.0, 50.0), "link_efficiency": (0.05, 1.0)}
# and the attention kernels' documented utilisation, which the model otherwise looks up by the preset's name (a
# calibrated file renames the machine, so it carries its base's figure)
CALIBRATION_KEYS = {**CALIBRATION_RANGES, "flash_attention_utilisation": (0.05, 1.0)}
REQUIRED = ("gpu_memory_bytes", "gpus_per_node", "nvlink_bytes_per_s", "infiniband_bytes_per_s")
OPTIONAL = (
    "effective_flop_per_s",
    "peak_bf16_flop_per_s",
    "peak_fp8_flop_per_s",
    "peak_mxfp8_flop_per_s",
    "hbm_bytes_per_s",
    "device_total_bytes",
    "fb_total_bytes",
)
COUNTS = ("gpus_per_host",)  # optional counts (``gpus_per_node`` is required)
MAX_MEMORY_BYTES = 1e15  # 1 PB per GPU: beyond any device, and far from float overflow
MAX_FILE_BYTES = 2**20  # a hardware file is a few kB; anything this large is not one (checked before reading it)
MAX_RATE = 1e21  # bytes or FLOP per second


def _positive(name: str, value, limit: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not value > 0:
        raise ValueError(f"{name}={value!r} must be a positive finite number")
    if value > limit:
        raise ValueError(f"{name}={value:.4g} is more than {limit:.0e}, beyond any real machine")
    return value


@dataclass(frozen=True)
class Hardware:
    """One machine: GPU memory (B), GPUs per node, NVLink and InfiniBand bandwidth per GPU per direction (B/s),
    and compute (FLOP/s): ``effective_flop_per_s`` is the lab page's sustained-rate assumption (the lab preset
    only), ``peak_bf16_flop_per_s`` the datasheet's dense bf16 peak, ``peak_fp8_flop_per_s`` its dense FP8 (E4M3/E5M2,
    per-tensor scaled) peak where the GPU has FP8 tensor cores (Hopper, Blackwell) and ``peak_mxfp8_flop_per_s`` its
    dense MXFP8 (block-scaled, 32 elements per E8M0 scale: Blackwell's fifth-generation tensor cores only) peak; None
    where the GPU has none. ``device_total_bytes`` is what CUDA exposes to the
    process (``torch.cuda.mem_get_info()[1]``, the "total capacity" of PyTorch's out-of-memory message), the bound the
    peak-memory verdict uses; ``fb_total_bytes`` what nvidia-smi reports (the driver reserves the difference).
    ``gpu_memory_bytes`` stays the datasheet's round figure, the lab page's convention. ``gpus_per_node`` is the
    NVLink domain (groups inside it use NVLink, groups across domains InfiniBand); ``gpus_per_host`` the GPUs one host
    (one operating system, one ``torchrun`` agent) drives, which the launch commands use: None when a host is the
    whole domain (HGX/DGX nodes of 8), 4 on a GB200 NVL72 rack of 72. It divides ``gpus_per_node``. ``calibration``
    holds the step-time model's constants fitted to this machine's own runs (``meshplan calibrate`` writes them as
    the file's ``step_time_calibration``), used instead of the stored fit; empty for the presets. Validated on
    construction."""

    name: str = DEFAULT_HARDWARE
    gpu_memory_bytes: float = 80e9
    gpus_per_node: int = 8
    nvlink_bytes_per_s: float = 160e9
    infiniband_bytes_per_s: float = 50e9
    effective_flop_per_s: float | None = 400e12
    peak_bf16_flop_per_s: float | None = None
    peak_fp8_flop_per_s: float | None = None
    peak_mxfp8_flop_per_s: float | None = None
    hbm_bytes_per_s: float | None = None
    device_total_bytes: float | None = None
    fb_total_bytes: float | None = None
    gpus_per_host: int | None = None
    label: str = ""
    sources: tuple[tuple[str, str], ...] = ()
    calibration: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"hardware name={self.name!r} must be a non-empty string")
        _positive("gpu_memory_bytes", self.gpu_memory_bytes, MAX_MEMORY_BYTES)
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node={self.gpus_per_node!r} must be a positive integer")
        if self.gpus_per_node > 1 << 20:
            raise ValueError(f"gpus_per_node={self.gpus_per_node:,} is more than 1,048,576")
        host = self.gpus_per_host
        if host is not None:
            if isinstance(host, bool) or not isinstance(host, int) or host < 1:
                raise ValueError(f"gpus_per_host={host!r} must be a positive integer")
            if self.gpus_per_node % host:
                raise ValueError(
                    f"gpus_per_host={host} does not divide gpus_per_node={self.gpus_per_node}: a host's GPUs lie in "
                    "one NVLink domain"
                )
        for k in ("nvlink_bytes_per_s", "infiniband_bytes_per_s"):
            _positive(k, getattr(self, k), MAX_RATE)
        for k in OPTIONAL:
            if getattr(self, k) is not None:
                _positive(k, getattr(self, k), MAX_RATE)
        for k, x in self.calibration:  # the ranges are the step-time model's (steptime.model.PHYSICAL_RANGES)
            if k not in CALIBRATION_KEYS:
                raise ValueError(f"calibration key {k!r} is not one of {', '.join(CALIBRATION_KEYS)}")
            lo, hi = CALIBRATION_KEYS[k]
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not lo <= x <= hi:
                raise ValueError(f"calibration {k}={x!r} must lie in [{lo}, {hi}]")

    def bandwidth(self, link: str | None) -> float:
        """Bytes per second of ``"nvlink"`` or ``"infiniband"`` (ValueError for anything else)."""
        if link == "nvlink":
            return self.nvlink_bytes_per_s
        if link == "infiniband":
            return self.infiniband_bytes_per_s
        raise ValueError(f"link={link!r} must be 'nvlink' or 'infiniband'")

    @property
    def host_gpus(self) -> int:
        """The GPUs of one host, as the launchers count them (``gpus_per_host``, else the whole NVLink domain)."""
        return self.gpus_per_node if self.gpus_per_host is None else self.gpus_per_host

    def with_overrides(
        self, gpu_memory_bytes: float | None = None, gpus_per_node: int | None = None, gpus_per_host: int | None = None
    ) -> Hardware:
        """This machine with another GPU memory, NVLink-domain size or host size (validated); unchanged when all are
        None. A new domain size that the machine's host size does not divide takes hosts of the whole domain (a
        6-GPU domain given to the GB200 preset, whose hosts of 4 do not divide it, has hosts of 6), unless
        ``gpus_per_host`` is given too."""
        changes: dict = {}
        if gpu_memory_bytes is not None:
            changes["gpu_memory_bytes"] = gpu_memory_bytes
        if gpus_per_node is not None:
            changes["gpus_per_node"] = gpus_per_node
            if gpus_per_host is None and self.gpus_per_host is not None and gpus_per_node % self.gpus_per_host:
                changes["gpus_per_host"] = None
        if gpus_per_host is not None:
            changes["gpus_per_host"] = gpus_per_host
        return replace(self, **changes) if changes else self

    def source(self, key: str) -> str:
        """Where the value of ``key`` comes from."""
        return dict(self.sources).get(key, "")


def available_hardware() -> list[str]:
    """Preset names in ``data/hardware/``."""
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.json"))


def _read(path: Path, shipped: bool = False) -> Hardware:
    """The hardware file ``path``: its structure checked by ``data/schemas/hardware.schema.json``, its values by
    ``Hardware``; every error names the file and the field. A ``shipped`` preset is checked against the schema only
    if it fails to load (tests/test_data_schemas.py checks every preset): planning with a preset never imports
    jsonschema, whose import (about 0.1 s) would be a third of the command line's start."""
    where = f"malformed hardware file {str(path)!r}"
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ValueError(
                f"cannot read hardware file {str(path)!r}: {size:,} bytes is not a hardware file (at most "
                f"{MAX_FILE_BYTES:,})"
            )
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"cannot read hardware file {str(path)!r}: {exc}") from None
    if not shipped:
        check(raw, "hardware", where)
    try:
        present = [k for k in (*REQUIRED, *OPTIONAL, *COUNTS) if raw.get(k) is not None]
        values: dict[str, Any] = {k: raw[k]["value"] if k in present else None for k in (*REQUIRED, *OPTIONAL, *COUNTS)}
        fitted = raw.get("step_time_calibration") or {}
        return Hardware(
            name=raw.get("name", path.stem),
            label=raw.get("label", ""),
            sources=tuple((k, raw[k]["source"]) for k in present)
            + tuple((f"step_time_calibration.{k}", v["source"]) for k, v in sorted(fitted.items())),
            calibration=tuple((k, v["value"]) for k, v in sorted(fitted.items())),
            **values,
        )
    except ValueError as exc:
        if shipped:
            check(raw, "hardware", where)  # the schema's message, when the structure is what is wrong
        raise ValueError(f"{where}: {exc}") from None
    except (AttributeError, KeyError, TypeError):  # only a shipped preset gets here unchecked
        check(raw, "hardware", where)
        raise


@cache
def load_hardware(name: str | None = None) -> Hardware:
    """A preset by name (``data/hardware/<name>.json``; default ``lab``) or by path to such a file.

    ValueError for an unknown name (listing the presets), an unreadable or malformed file.
    """
    name = DEFAULT_HARDWARE if name is None else name
    if not isinstance(name, (str, Path)):
        raise ValueError(f"hardware={name!r} must be a preset name or a path")
    text = str(name)
    path = HARDWARE_DIR / f"{text}.json"
    try:
        preset = bool(text) and "/" not in text and path.is_file()
    except OSError:  # e.g. a name longer than the file system allows
        preset = False
    if preset:
        return _read(path, shipped=True)
    p = Path(text)
    try:
        is_file = p.is_file()
    except OSError:
        is_file = False
    if not is_file:
        raise ValueError(
            f"unknown hardware {text[:200]!r}: not a file and not one of {', '.join(available_hardware())}"
        )
    return _read(p)
