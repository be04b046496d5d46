#!/usr/bin/env python3
"""Measure the activation memory of one transformer layer of the anchor's width on a CUDA GPU and compare it
with Korthikanti et al. 2022, Table 2 (``meshplan.parallel.activations.activation_bytes_per_layer``).

    .venv/bin/python scripts/gpu_activation_check.py            # writes data/gpu_activation_check.json

The layer is the one the formula was derived for (Megatron's GPT layer): LayerNorm, self-attention with an
explicit softmax (no fused or flash kernel, which would not store the a·s² scores), attention and
residual dropout, a 4h GeLU MLP; bf16 activations, 1-byte dropout masks. h = the anchor's hidden size
(5,120) with heads of the anchor's head_dim (256), so a = h ÷ 256 = 20 (Korthikanti assumes a·head_dim = h).
"Stored activations" = ``torch.cuda.memory_allocated()`` after the forward pass minus before it (the
layer's output, s·b·h × 2 B, is subtracted: it belongs to the next layer); the peak during the forward
(``torch.cuda.max_memory_allocated``) is recorded too. Selective recompute wraps the attention core
(QKᵀ, softmax, dropout, ·V) in ``torch.utils.checkpoint``. No recompute and selective recompute are
measured for each sequence length. Without CUDA the script refuses (exit 2) and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import meshplan
from meshplan.parallel import activations

OUT = Path(__file__).resolve().parents[1] / "lib" / "meshplan" / "data" / "gpu_activation_check.json"


def build_layer(torch, h, a, p_drop=0.1):
    nn, F = torch.nn, torch.nn.functional
    Module: Any = nn.Module  # torch arrives as an argument (imported after the CUDA check), so no static type

    class Layer(Module):
        def __init__(self, selective):
            super().__init__()
            self.selective = selective
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def core(self, q, k, v):
            scores = torch.matmul(q, k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
            probs = F.dropout(torch.softmax(scores, dim=-1), p_drop, self.training)
            return torch.matmul(probs, v)

        def forward(self, x):  # x: (s, b, h)
            s, b, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(s, b, a, 3, h // a).permute(3, 1, 2, 0, 4)
            if self.selective:
                y = torch.utils.checkpoint.checkpoint(self.core, q, k, v, use_reentrant=False)
            else:
                y = self.core(q, k, v)
            y = y.permute(2, 0, 1, 3).reshape(s, b, h)
            x = x + F.dropout(self.proj(y), p_drop, self.training)
            return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), p_drop, self.training)

    return Layer


def measure(torch, device, h, a, s, b, selective):
    Layer = build_layer(torch, h, a)
    layer = Layer(selective).to(device=device, dtype=torch.bfloat16).train()
    x = torch.randn(s, b, h, device=device, dtype=torch.bfloat16, requires_grad=True)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    y = layer(x)
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    stored = torch.cuda.memory_allocated() - before - y.numel() * y.element_size()
    peak = torch.cuda.max_memory_allocated() - before
    y.float().sum().backward()
    del y, layer, x
    torch.cuda.empty_cache()
    return int(stored), int(peak)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--cpu-smoke", action="store_true", help="run tiny shapes on the CPU to test the code; writes nothing"
    )
    args = ap.parse_args(argv)
    import torch

    if args.cpu_smoke:
        for sel in (False, True):
            measure(torch, "cpu", 64, 4, 32, 1, sel)
        print("cpu smoke run: ok (no measurement)")
        return 0
    if not torch.cuda.is_available():
        print("gpu_activation_check: no CUDA device here; this check needs a GPU and wrote nothing", file=sys.stderr)
        return 2
    anchor = meshplan.load_model("qwen3.8-27b")
    h = anchor.hidden_size
    a = h // anchor.head_dim
    b = 1
    torch.manual_seed(0)
    rows = []
    for s in args.seq:
        for mode in ("none", "selective"):
            stored, peak = measure(torch, "cuda", h, a, s, b, mode == "selective")
            pred = activations.activation_bytes_per_layer(s, b, h, a, t=1, recompute=mode)
            rows.append(
                {
                    "seq": s,
                    "micro_batch": b,
                    "hidden": h,
                    "heads": a,
                    "recompute": mode,
                    "predicted_bytes": pred,
                    "measured_stored_bytes": stored,
                    "measured_peak_bytes": peak,
                    "ratio": stored / pred,
                }
            )
    doc = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "formula": "Korthikanti et al. 2022 (arXiv:2205.05198) Table 2: sbh(34 + 5as/h), selective sbh·34",
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
