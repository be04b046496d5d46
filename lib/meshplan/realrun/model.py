"""The course's small model in PyTorch: a GPT with the shapes of ``data/models/small-3.7m.json``.

Vocabulary V = 2,048 (output head tied to the input embedding), P = 64 learned positions, d_model h = 256,
L = 4 layers of 4 heads (head dim 64), MLP h → 4h → h with GELU, weight-only RMSNorm (2 per layer + 1
final), no biases: V·h + P·h + L·(4h² + 2·h·4h + 2h) + h = 3,688,704 parameters, which
``tests/test_realrun.py`` checks against ``meshplan.load_model("small-3.7m").params.total``.

Attention holds separate q, k, v and o projections (``fused_qkv=False``) or one h → 3h projection laid out
head by head, [head][q|k|v][head_dim] (``fused_qkv=True``), so that a column split over t ranks gives each
rank whole heads. The count is the same.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from meshplan.spec.model import ModelSpec, load_model

SMALL = "small-3.7m"


class RMSNorm(nn.Module):
    def __init__(self, h: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, h: int, heads: int, fused_qkv: bool):
        super().__init__()
        self.heads, self.head_dim, self.fused = heads, h // heads, fused_qkv
        if fused_qkv:
            self.qkv = nn.Linear(h, 3 * h, bias=False)
        else:
            self.q = nn.Linear(h, h, bias=False)
            self.k = nn.Linear(h, h, bias=False)
            self.v = nn.Linear(h, h, bias=False)
        self.o = nn.Linear(h, h, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        d = self.head_dim
        if self.fused:
            qkv = self.qkv(x).view(b, s, -1, 3, d)  # heads local to this rank under TP
            q, k, v = qkv.unbind(3)
        else:
            q, k, v = (lin(x).view(b, s, -1, d) for lin in (self.q, self.k, self.v))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, h: int, ffn: int):
        super().__init__()
        self.fc1 = nn.Linear(h, ffn, bias=False)
        self.fc2 = nn.Linear(ffn, h, bias=False)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, h: int, heads: int, ffn: int, fused_qkv: bool):
        super().__init__()
        self.norm1 = RMSNorm(h)
        self.attn = Attention(h, heads, fused_qkv)
        self.norm2 = RMSNorm(h)
        self.mlp = MLP(h, ffn)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """The small model. ``forward(tokens)`` returns logits of shape (b, s, V)."""

    def __init__(self, spec: ModelSpec, ffn: int, fused_qkv: bool = False):
        super().__init__()
        h, positions = spec.hidden_size, spec.max_position_embeddings
        if positions is None:
            raise ValueError(f"{spec.name}: the small GPT needs max_position_embeddings (learned positions)")
        self.wte = nn.Embedding(spec.vocab_size, h)
        self.wpe = nn.Embedding(positions, h)
        self.blocks = nn.ModuleList(Block(h, spec.num_attention_heads, ffn, fused_qkv) for _ in range(spec.num_layers))
        self.norm = RMSNorm(h)
        self.head = nn.Linear(h, spec.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(
                    p, std=0.02 if "o." not in name and "fc2" not in name else 0.02 / math.sqrt(2 * spec.num_layers)
                )

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def small_spec() -> ModelSpec:
    return load_model(SMALL)


def build_small(seed: int = 0, fused_qkv: bool = False) -> GPT:
    """The small model with seeded weights (fp32 on CPU)."""
    spec = small_spec()
    h = spec.hidden_size
    ffn = (spec.layer_params[0] - 4 * h * h - 2 * h) // (2 * h)  # the MLP width, from the layer's count
    torch.manual_seed(seed)
    return GPT(spec, ffn, fused_qkv)


def count_params(model: nn.Module) -> int:
    """Stored parameters (a tied tensor counts once)."""
    return sum(p.numel() for p in model.parameters())


def batch(seed: int, b: int, s: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic batch of token ids and next-token targets."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (b, s + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
