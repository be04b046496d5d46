"""The runs themselves: each ``*_worker(rank, world, ...)`` runs on a forked gloo rank (``launch.run_ranks``)
and returns plain numbers measured on that rank. Seeded, fixed shapes, a few steps; no timings.
"""

from __future__ import annotations

import warnings
from collections import Counter

import torch
import torch.distributed as dist

from meshplan.realrun.logger import CollectiveLogger
from meshplan.realrun.model import batch, build_small, loss_fn

SEQ, MICRO_B = 16, 2  # tokens per sequence and sequences per rank: small on purpose (2 shared cores)


def _step(model, opt, log, rank, world, it):
    x, y = batch(1000 + it * world + rank, MICRO_B, SEQ, 2048)
    log.phase = "forward"
    loss = loss_fn(model(x), y)
    log.phase = "backward"
    loss.backward()
    log.phase = "step"
    opt.step()
    opt.zero_grad(set_to_none=False)
    log.phase = ""


def _calls(log):
    return [(c.kind, c.phase, c.payload_bytes, c.dtype) for c in log.take()]


# ------------------------------------------------------------------------------------------- DDP
def ddp_worker(rank, world, bucket_cap_mb, steps=3):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(build_small(), bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    per_step = []
    with CollectiveLogger() as log:
        for it in range(steps):
            _step(model, opt, log, rank, world, it)
            per_step.append(_calls(log))
    return {"steps": per_step}


# ------------------------------------------------------------------------------------------- FSDP2
def fsdp_worker(rank, world, reshard_after_forward, steps=2):
    from torch.distributed.fsdp import fully_shard

    model = build_small()
    for blk in model.blocks:
        fully_shard(blk, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    per_step = []
    with CollectiveLogger() as log:
        for it in range(steps):
            _step(model, opt, log, rank, world, it)
            per_step.append(_calls(log))

    def local(t):
        return t.to_local().numel() * t.element_size()

    params = list(model.parameters())
    return {
        "steps": per_step,
        "param_bytes": sum(local(p) for p in params),
        "grad_bytes": sum(local(p.grad) for p in params),
        "optim_bytes": sum(local(v) for st in opt.state.values() for k, v in st.items() if k != "step"),
        "step_counters": sum(1 for st in opt.state.values() if "step" in st),
    }


def fsdp_accum_worker(rank, world, configs, steps=1):
    """FSDP2 with gradient accumulation: for each ``(reshard_after_forward, sync_last_only, m)`` in
    ``configs`` a fresh model (each block and the root a ``fully_shard`` unit; ``reshard_after_forward``
    None leaves FSDP2's default), ``steps`` optimizer steps of m micro-batches each, the loss divided by m.
    With ``sync_last_only`` the gradients are reduce-scattered only on the last micro-batch
    (``set_requires_gradient_sync(False)`` on the others). Returns the last step's calls per config."""
    from torch.distributed.fsdp import fully_shard

    out = []
    for reshard_after_forward, sync_last_only, m in configs:
        model = build_small()
        kw = {} if reshard_after_forward is None else {"reshard_after_forward": reshard_after_forward}
        for blk in model.blocks:
            fully_shard(blk, **kw)
        root = fully_shard(model, **kw)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        with CollectiveLogger() as log:
            for it in range(steps):
                for j in range(m):
                    if sync_last_only:
                        root.set_requires_gradient_sync(j == m - 1)
                    x, y = batch(1000 + (it * m + j) * world + rank, MICRO_B, SEQ, 2048)
                    log.phase = "forward"
                    loss = loss_fn(model(x), y) / m
                    log.phase = "backward"
                    loss.backward()
                log.phase = "step"
                opt.step()
                opt.zero_grad()
                log.phase = ""
                calls = _calls(log)
        out.append(calls)
    return out


# ------------------------------------------------------------------------------------------- ZeRO-1
def zero1_worker(rank, world, steps=2):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(build_small())
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    per_step = []
    with CollectiveLogger() as log:
        for it in range(steps):
            _step(model, opt, log, rank, world, it)
            per_step.append(_calls(log))
    mine = sum(v.numel() * v.element_size() for st in opt.optim.state.values() for k, v in st.items() if k != "step")
    return {"steps": per_step, "optim_bytes": mine, "numels": [p.numel() for p in model.parameters()]}


# ------------------------------------------------------------------------------------------- TP
def tp_worker(rank, world, fused_qkv, sequence_parallel):
    """The four blocks of the small model under DTensor TP, on an input of shape (b, s, h)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (world,))
    model = build_small(fused_qkv=fused_qkv)
    out_layout = Shard(1) if sequence_parallel else Replicate()
    for blk in model.blocks:
        plan = {
            "attn.o": RowwiseParallel(output_layouts=out_layout),
            "mlp.fc1": ColwiseParallel(),
            "mlp.fc2": RowwiseParallel(output_layouts=out_layout),
        }
        for name in ("qkv",) if fused_qkv else ("q", "k", "v"):
            plan[f"attn.{name}"] = ColwiseParallel()
        if sequence_parallel:
            for name in ("norm1", "norm2"):
                plan[name] = SequenceParallel()
            for name in ("attn", "mlp"):
                plan[name] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        parallelize_module(blk, mesh, plan)
    torch.manual_seed(7)
    x = torch.randn(MICRO_B, SEQ, model.wte.embedding_dim)
    if sequence_parallel:
        x = x.chunk(world, dim=1)[rank].contiguous()
    x.requires_grad_(True)
    with CollectiveLogger() as log:
        log.phase = "forward"
        y = x
        for blk in model.blocks:
            y = blk(y)
        log.phase = "backward"
        y.pow(2).mean().backward()
    partial = [
        g
        for g in (p.grad for p in model.blocks.parameters())
        if isinstance(g, DTensor) and any(isinstance(pl, Partial) for pl in g.placements)
    ]
    return {
        "calls": _calls(log),
        "layers": len(model.blocks),
        "shape": [MICRO_B, SEQ, model.wte.embedding_dim],
        "partial_grad_bytes": sum(g.to_local().numel() * g.element_size() for g in partial),
    }


# ------------------------------------------------------------------------------------------- PP
class _Stage(torch.nn.Module):
    """Blocks ``lo:hi`` of the small model; the first stage embeds, the last applies the norm and an
    (untied) copy of the head."""

    def __init__(self, full, lo, hi, first, last):
        super().__init__()
        self.first, self.last = first, last
        self.blocks = torch.nn.ModuleList(full.blocks[lo:hi])
        if first:
            self.wte, self.wpe = full.wte, full.wpe
        if last:
            self.norm = full.norm
            self.head = torch.nn.Linear(full.wte.embedding_dim, full.wte.num_embeddings, bias=False)
            self.head.weight = torch.nn.Parameter(full.wte.weight.detach().clone())

    def forward(self, x):
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x)) if self.last else x


def pp_worker(rank, world, schedule, virtual, micro_batches, steps=2):
    import torch.distributed.pipelining.schedules as S
    from torch.distributed.pipelining import PipelineStage

    full = build_small()
    n_stages = world * virtual
    per = len(full.blocks) // n_stages
    if schedule == "ZBVZeroBubble":
        mine = [rank, n_stages - 1 - rank]
    else:
        mine = [rank + world * i for i in range(virtual)]
    stages = [
        PipelineStage(_Stage(full, s * per, (s + 1) * per, s == 0, s == n_stages - 1), s, n_stages, torch.device("cpu"))
        for s in mine
    ]
    cls = getattr(S, f"Schedule{schedule}")
    sched = cls(stages[0] if virtual == 1 else stages, micro_batches, loss_fn=loss_fn)
    sends = []
    with CollectiveLogger() as log:
        for it in range(steps):
            x, y = batch(2000 + it, micro_batches, SEQ, 2048)
            args = (x,) if 0 in mine else ()
            kwargs = {"target": y} if n_stages - 1 in mine else {}
            sched.step(*args, **kwargs)
            sends.append([c for c in _calls(log) if c[0] == "send"])
    return {"sends": sends[-1], "stages": mine, "shape": [1, SEQ, full.wte.embedding_dim]}


# ------------------------------------------------------------------------------------------- orders
def schedule_orders(rank, world, p: int, micro_batches: int, names_v: list[tuple[str, int]]):
    """Each schedule's ``pipeline_order`` for p ranks, built in this process over a fake process group
    (no data moves). Returns {name: {rank: [action, ...]}} with compute actions only, in torch's names:
    ``(kind, stage, microbatch)`` with kind F, B, I or W, or ``("OVERLAP_F_B", stage, microbatch, backward
    stage, backward microbatch)``. The V-shaped schedules (ZBVZeroBubble, DualPipeV) put stages r and
    2p−1−r on rank r. Schedule1F1B's last rank numbers its forwards 1..m, which is renumbered to 0..m−1."""
    import torch.distributed.pipelining.schedules as S
    from torch.distributed.pipelining import PipelineStage
    from torch.testing._internal.distributed.fake_pg import FakeStore

    out = {}
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=p)
    try:
        for name, v in names_v:
            n = p * v
            idx = [0, n - 1] if name in ("ZBVZeroBubble", "DualPipeV") else [p * i for i in range(v)]
            stages = [PipelineStage(torch.nn.Linear(2, 2), i, n, torch.device("cpu")) for i in idx]
            single = name in ("GPipe", "1F1B")
            sched = getattr(S, f"Schedule{name}")(stages[0] if single else stages, micro_batches)
            order = {}
            for r, acts in sched.pipeline_order.items():
                rows: list[tuple] = []
                for a in acts:
                    kind = None if a is None else a.computation_type.value
                    if kind == "OVERLAP_F_B":
                        fwd, bwd = a.sub_actions
                        rows.append(
                            (kind, fwd.stage_index, fwd.microbatch_index, bwd.stage_index, bwd.microbatch_index)
                        )
                    elif kind in ("F", "B", "I", "W"):
                        rows.append((kind, a.stage_index, a.microbatch_index))
                for s in {row[1] for row in rows}:
                    fw = sorted(row[2] for row in rows if row[0] == "F" and row[1] == s)
                    if fw == list(range(1, micro_batches + 1)):
                        rows = [
                            (k, st, mb - 1, *rest) if (k == "F" and st == s) else (k, st, mb, *rest)
                            for k, st, mb, *rest in rows
                        ]
                order[r] = rows
            out[name] = order
    finally:
        dist.destroy_process_group()
    return out


# ------------------------------------------------------------------------------------------- wire
def wire_worker(rank, world, numel):
    """Bytes this rank wrote to sockets (``/proc/self/io`` wchar) for one collective of each kind."""
    t = torch.ones(numel)
    out = torch.empty(numel)
    shard = torch.empty(numel // world)

    def wchar():
        with open("/proc/self/io") as f:
            return int(next(line for line in f if line.startswith("wchar")).split()[1])

    res = {}
    warnings.filterwarnings("ignore", category=FutureWarning)
    for kind, fn in (
        ("all_reduce", lambda: dist.all_reduce(t)),
        ("all_gather", lambda: dist.all_gather_into_tensor(out, torch.ones(numel // world))),
        ("reduce_scatter", lambda: dist.reduce_scatter_tensor(shard, t)),
    ):
        dist.barrier()
        before = wchar()
        fn()
        res[kind] = wchar() - before
    return res


def counts(calls, phase=None):
    """Counter of kinds among ``calls`` (optionally one phase)."""
    return Counter(k for k, ph, _, _ in calls if phase is None or ph == phase)
