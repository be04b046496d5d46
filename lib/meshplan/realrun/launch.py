"""Run a function on N forked ranks of one machine over gloo, with a hard timeout and no leftovers.

Ranks are forked (``torch.multiprocessing.start_processes(start_method="fork")``) from a parent that has
already imported ``torch.distributed``: on a 2-core machine a fork costs a fraction of a second where a
spawned interpreter re-imports torch for seconds. Rendezvous goes through a ``FileStore`` in a fresh
temporary directory, so no TCP port is chosen by us; gloo's own connections bind to the loopback
interface (``GLOO_SOCKET_IFNAME=lo``, set in the children only) on ports the kernel picks. Each rank
writes its result (a picklable object) to a file; the parent waits with a deadline, then terminates and
kills any rank still alive, and always removes the directory.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import time
import traceback

DEFAULT_TIMEOUT_S = 120.0
# Modules the ranks import lazily, imported once in the parent before forking so that no rank pays for them:
# ``DistributedDataParallel.__init__`` and ``fully_shard`` import ``torch._dynamo`` on first use, 2-5 s of CPU per
# rank on a 2-core machine (cProfile of one DDP construction: 5.1 of its 5.3 s are that import). Forked ranks
# inherit the parent's modules, so importing them here once makes every later run start warm.
PRELOADED = (
    "torch.distributed",
    "torch._dynamo",
    "torch.nn.parallel",
    "torch.distributed.fsdp",
    "torch.distributed.optim",
    "torch.distributed.tensor.parallel",
    "torch.distributed.pipelining",
)


class RunError(RuntimeError):
    """A rank failed or the run passed its deadline."""


def preload() -> None:
    """Import ``PRELOADED`` in this (the parent) process; cheap after the first call. The deprecation warnings
    some of them raise on import (``torch.jit.script`` and ``torch.jit.interface``, used inside torch) are torch's,
    not the caller's, and are silenced."""
    import importlib
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in PRELOADED:
            importlib.import_module(name)


def _child(rank: int, fn, world: int, tmpdir: str, args: tuple, backend) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if backend:
        store = dist.FileStore(os.path.join(tmpdir, "store"), world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    try:
        out = fn(rank, world, *args)
        status = ("ok", out)
    except BaseException:  # reported to the parent, which raises
        status = ("error", traceback.format_exc())
    try:
        with open(os.path.join(tmpdir, f"rank{rank}.pkl.tmp"), "wb") as f:
            pickle.dump(status, f)
        os.replace(os.path.join(tmpdir, f"rank{rank}.pkl.tmp"), os.path.join(tmpdir, f"rank{rank}.pkl"))
    finally:
        if backend:
            if status[0] == "ok":
                dist.barrier()
            dist.destroy_process_group()
        if status[0] != "ok":
            os._exit(1)  # skip peers' barrier: the parent kills the rest


def run_ranks(
    fn, world: int, args: tuple = (), timeout_s: float = DEFAULT_TIMEOUT_S, backend: str | None = "gloo"
) -> list:
    """``[fn(rank, world, *args) for each rank]``, run on ``world`` forked gloo ranks.

    ``fn`` must be a module-level function; its return value must pickle. Raises ``RunError`` with the
    first rank's traceback if a rank fails, or if the run takes longer than ``timeout_s``. With
    ``backend=None`` the ranks start without a process group.
    """
    import torch.multiprocessing as mp

    preload()  # torch.distributed and what the ranks would import lazily: the children inherit them
    if world < 1:
        raise ValueError(f"world={world!r} must be a positive integer")
    tmpdir = tempfile.mkdtemp(prefix="meshplan-realrun-")
    ctx = None
    try:
        ctx = mp.start_processes(
            _child, args=(fn, world, tmpdir, args, backend), nprocs=world, join=False, start_method="fork"
        )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if ctx.join(timeout=max(0.05, min(1.0, deadline - time.monotonic()))):
                    break
            except Exception:
                break  # a rank exited non-zero: collect the reports below
            if time.monotonic() > deadline:
                raise RunError(f"run of {getattr(fn, '__name__', fn)} on {world} ranks passed {timeout_s:.0f} s")
        results = []
        for rank in range(world):
            path = os.path.join(tmpdir, f"rank{rank}.pkl")
            if not os.path.exists(path):
                raise RunError(f"rank {rank} of {world} produced no result")
            with open(path, "rb") as f:
                status, value = pickle.load(f)
            if status != "ok":
                raise RunError(f"rank {rank} of {world} failed:\n{value}")
            results.append(value)
        return results
    finally:
        if ctx is not None:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()
                    p.join(timeout=5)
        shutil.rmtree(tmpdir, ignore_errors=True)
