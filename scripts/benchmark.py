"""Performance figures of the course (a benchmark, not a test: timings never gate CI).

Targets (issue 2): evaluating one plan ≤ 1 ms; `pytest` ≤ 60 s; a clean book build ≤ 120 s on a
2-core machine.

    .venv/bin/python scripts/benchmark.py            # plan evaluation only (a few seconds)
    .venv/bin/python scripts/benchmark.py --full     # also a clean book build and the test suite
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench_plans(repeat: int = 2000) -> None:
    import meshplan
    from meshplan.lab import LAB_8_GPUS, LAB_64_GPUS, lab_plan

    cases = {
        "evaluate(plan), anchor lab rows": [lab_plan(r) for r in LAB_8_GPUS + LAB_64_GPUS],
        "evaluate(plan), Llama 3.1 405B, TP 8 x PP 14 x DP 128 = 14,336 GPUs (PP 16 does not divide its 126 layers)":
            [meshplan.Plan.create("llama-3.1-405b", gpus=14336, tp=8, pp=14, zero=1, recompute="full")],
        "evaluate(plan), DeepSeek-V3 2,048 GPUs (PP 1, EP 64, DP 256)":
            [meshplan.Plan.create("deepseek-v3", gpus=2048, ep=64, zero=1, recompute="full")],
    }
    for name, plans in cases.items():
        samples = []
        for _ in range(repeat // len(plans)):
            t0 = time.perf_counter()
            for p in plans:
                meshplan.evaluate(p)
            samples.append((time.perf_counter() - t0) / len(plans))
        print(f"{name}: median {statistics.median(samples) * 1e3:.3f} ms, "
              f"max {max(samples) * 1e3:.3f} ms per plan ({len(samples)} samples)")
    samples = []
    for _ in range(500):
        t0 = time.perf_counter()
        meshplan.evaluate(meshplan.Plan.create("qwen3.8-27b", gpus=64, tp=8, pp=2, zero=1, recompute="full"))
        samples.append(time.perf_counter() - t0)
    print(f"Plan.create (loads the config) + evaluate: median {statistics.median(samples) * 1e3:.3f} ms")


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="also time a clean book build and pytest")
    args = ap.parse_args()
    bench_plans()
    if args.full:
        shutil.rmtree(ROOT / "_build", ignore_errors=True)
        print(f"clean book build (make book): {timed(['make', 'book']):.1f} s")
        print(f"test suite (.venv/bin/python -m pytest): {timed([sys.executable, '-m', 'pytest', '-q']):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
