#!/usr/bin/env python3
"""Measure the peak memory of real training steps on a CUDA GPU and compare it with the fsdp2 ledger's peak
(``meshplan.parallel.peak`` through ``evaluate``): the GPU side of ``tests/test_peak_measure.py``, which checks the
same ledger against PyTorch's ``FSDPMemTracker`` on fake tensors.

    .venv/bin/python scripts/gpu_peak_check.py            # writes lib/meshplan/data/gpu_peak_check.json

Each case builds a shipped model's config with a few layers at real width (``transformers``, fp32 parameters on
the GPU), wraps it as torchtitan 0.3.0 does on one rank (the embedding, [final norm, head] and every decoder layer
a ``fully_shard`` unit, bf16 compute and fp32 reduction, optional per-layer full checkpointing), and runs two
steps of forward, backward and fused AdamW with ``zero_grad(set_to_none=False)``. The second step's
``torch.cuda.max_memory_allocated`` (reset after the first) is the measured allocated peak and
``max_memory_reserved`` the reserved one; the ledger's plan is the same model on one GPU (``gpus=1, zero=3``),
priced for the GPU. It measures what the CPU cannot: the CUDA kernels' own saved tensors and workspaces, and the
caching allocator's reserve. Without CUDA the script refuses (exit 2) and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "lib" / "meshplan" / "data" / "gpu_peak_check.json"
CASES = [  # shipped model, layers, seq, recompute
    ("llama-3.1-8b", 2, 4096, "none"),
    ("llama-3.1-8b", 2, 8192, "full"),
    ("qwen3-8b", 2, 4096, "none"),
    # eight checkpointed layers: on the CPU tracker each back-propagated layer leaves 10·T·h bytes under FSDP2 that
    # the ledger does not count (1.2 GB here, at the first layer's backward); this case says whether a GPU does too
    ("llama-3.1-8b", 8, 4096, "full"),
]


def measure(torch, model_name: str, layers: int, seq: int, recompute: str) -> dict:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    from meshplan import Plan, evaluate
    from meshplan.core.resources import read_json
    from meshplan.spec.model import model_from_config

    raw = {**read_json("models", f"{model_name}.json"), "num_hidden_layers": layers}
    cfg = AutoConfig.for_model(**{k: v for k, v in raw.items() if k not in ("source", "architectures")})
    torch.cuda.empty_cache()
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa").cuda().train()
    if recompute == "full":
        for i, layer in enumerate(model.model.layers):
            model.model.layers[i] = checkpoint_wrapper(layer, early_stop=False)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    fully_shard(model.model.embed_tokens, mp_policy=mp, reshard_after_forward=True)
    fully_shard([model.model.norm, model.lm_head], mp_policy=mp, reshard_after_forward=False)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda")
    for step in range(2):
        if step == 1:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
    torch.cuda.synchronize()
    allocated, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    plan = Plan.create(model_from_config(raw, model_name), gpus=1, zero=3, seq=seq, micro_batches=1,
                       recompute=recompute, accounting="fsdp2")  # fmt: skip
    r = evaluate(plan)
    peak = r.by_stage[r.peak_stage].peak
    del model, opt
    return {
        "model": model_name, "layers": layers, "seq": seq, "recompute": recompute,
        "measured_allocated_bytes": allocated, "measured_reserved_bytes": reserved,
        "ledger_peak_bytes": peak.total, "ledger_moment": peak.name,
        "error": peak.total / allocated - 1, "reserved_over_allocated": reserved / allocated,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", type=Path, default=OUT)
    args = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        print("gpu_peak_check: no CUDA device; nothing measured", file=sys.stderr)
        return 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        rows = [measure(torch, *case) for case in CASES]
    finally:
        dist.destroy_process_group()
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    args.output.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        print(f"{row['model']} L{row['layers']} s{row['seq']} {row['recompute']}: measured "
              f"{row['measured_allocated_bytes'] / 1e9:.2f} GB allocated, {row['measured_reserved_bytes'] / 1e9:.2f} "
              f"reserved; ledger {row['ledger_peak_bytes'] / 1e9:.2f} GB ({row['error'] * 100:+.1f} %)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
