"""Performance figures of the course (a benchmark, not a test: timings never gate CI).

Targets: evaluating one plan ≤ 1 ms (lab ledger); the command line's search (``top=10``) of 16,384 GPUs ≤ 2 CPU-s in
the engine ledgers at any sequence length; the schedule
simulator near-linear in its operations; `make check` ≤ 20 s and the pytest parts of `make test` ≤ 60 s on a
2-core machine; a clean book build ≤ 120 s.

    .venv/bin/python scripts/benchmark.py            # plans, searches, schedules (about two minutes)
    .venv/bin/python scripts/benchmark.py --planner  # only the live planner in Chromium (needs the built site)
    .venv/bin/python scripts/benchmark.py --search   # only the searches (about four minutes)
    .venv/bin/python scripts/benchmark.py --full     # also make check, the parts of make test, page loads in
                                                     # Chromium, a clean book build (about 8 minutes)

Each command's figure is its seconds and the core-seconds the machine was busy meanwhile (/proc/stat: Chromium's
processes included). Core-seconds divided by the cores is the least time any schedule of that work can take, which
decides whether a target is in reach:
`--full` prints it for the pytest parts, and what part 1's CPU goes to (each group of its tests in one process).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def busy_s() -> float:
    """Core-seconds the whole machine has been busy since boot (/proc/stat: user, nice, system, irq, softirq).
    Unlike ``getrusage(RUSAGE_CHILDREN)`` it counts processes nobody waits for, such as Chromium's, which leave the
    process tree when the browser exits (the browser part keeps both cores busy, yet getrusage shows it about 30
    CPU-s in 41 s)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")


def bench_machine() -> None:
    """The machine's speed right now: CPU seconds of a fixed pure-Python loop (best of 5). It drifts on this machine
    (0.205 s, then 0.278 s, within one `make test`), so print it beside the timings it explains."""
    samples = []
    for _ in range(5):
        t0, acc = time.process_time(), 0
        for i in range(3_000_000):
            acc += i * i % 7
        samples.append(time.process_time() - t0)
    print(f"machine speed: a fixed Python loop takes {min(samples):.3f} s of CPU")


def bench_plans(repeat: int = 2000) -> None:
    import meshplan
    from meshplan.course.lab import LAB_8_GPUS, LAB_64_GPUS, lab_plan
    from meshplan.spec.stages import spread_layers

    cases = {
        "evaluate(plan), anchor lab rows": [lab_plan(r) for r in LAB_8_GPUS + LAB_64_GPUS],
        "evaluate(plan), Llama 3.1 405B as published, TP 8 x PP 16 x DP 128 = 16,384 GPUs (uneven stages)": [
            meshplan.Plan.create(
                "llama-3.1-405b",
                gpus=16384,
                tp=8,
                pp=16,
                zero=2,
                recompute="selective",
                seq=8192,
                micro_batches=16,
                layers_per_stage=spread_layers(126, 16),
            )
        ],
        "evaluate(plan), DeepSeek-V3 2,048 GPUs (PP 1, EP 64, DP 256)": [
            meshplan.Plan.create("deepseek-v3", gpus=2048, ep=64, zero=1, recompute="full")
        ],
    }
    for name, plans in cases.items():
        samples = []
        for _ in range(repeat // len(plans)):
            t0 = time.perf_counter()
            for p in plans:
                meshplan.evaluate(p)
            samples.append((time.perf_counter() - t0) / len(plans))
        print(
            f"{name}: median {statistics.median(samples) * 1e3:.3f} ms, "
            f"max {max(samples) * 1e3:.3f} ms per plan ({len(samples)} samples)"
        )
    samples = []
    for _ in range(500):
        t0 = time.perf_counter()
        meshplan.evaluate(meshplan.Plan.create("qwen3.8-27b", gpus=64, tp=8, pp=2, zero=1, recompute="full"))
        samples.append(time.perf_counter() - t0)
    print(f"Plan.create (loads the config) + evaluate: median {statistics.median(samples) * 1e3:.3f} ms")


def bench_search(repeat: int = 1) -> None:
    """Plan search, in CPU seconds of this process (``time.process_time``: what other processes on the machine run
    does not count), the median of ``repeat`` runs.

    * The command line's search (``top=10``, branch and bound: the 10 fastest and every plan within 10 % of the
      fastest ranked exactly, the rest left once a lower bound on their step time is above that), on 16,384 H100s
      in each engine ledger, for the two models with the most plans (DeepSeek-V3, Qwen3-30B-A3B: 123,120 and
      189,000) and Llama 3.1 405B, at s = 4,096 to 131,072; the target is 2 CPU-s each.
    * The full search (``top=None``: every plan priced and every fitting one ranked), DeepSeek-V3 and Llama 3.1 405B
      on 2,048 and 16,384 H100s at s = 8,192 and 131,072, a global batch of 2,048 sequences, in each ledger.
    * The command line's search at ``MAX_GPUS`` (1,048,576 H100s), the two models with the most plans and Llama 3.1
      405B, in the Megatron and FSDP2 ledgers.

    Then ``search --json``'s part, every kept plan's JSON object (``to_dict``) and ``json.dumps`` of the list, and
    ``meshplan search --top MAX_TOP --json`` in a new process (imports included), the most the command reports."""
    import json
    from functools import partial

    from meshplan.search import MAX_TOP, search

    H100 = "h100-sxm-80gb"

    def cpu(fn: Callable[[], T]) -> tuple[float, T]:
        samples = []
        for _ in range(repeat):
            t0 = time.process_time()
            out = fn()
            samples.append(time.process_time() - t0)
        return statistics.median(samples), out

    worst = (0.0, "")
    for model in ("deepseek-v3", "qwen3-30b-a3b", "llama-3.1-405b"):
        for seq, batch in ((4096, 8192), (8192, 16384), (32768, 2048), (131072, 2048)):
            for ledger in ("megatron", "fsdp2", "deepspeed"):
                t, result = cpu(partial(search, model, 16384, seq, batch, hardware=H100, accounting=ledger, top=10))
                label = f"search({model}, 16,384 GPUs, s = {seq:,}, B = {batch:,}, {ledger}, top=10)"
                print(
                    f"{label}: {result.enumerated:,} plans, {len(result.ranked):,} ranked, "
                    f"{result.unranked:,} left; {t:.2f} CPU-s"
                )
                worst = max(worst, (t, label))
    print(f"slowest bounded search: {worst[1]}, {worst[0]:.2f} CPU-s (target 2)")
    worst = (0.0, "")
    for model, seq, batch in (
        ("qwen3-30b-a3b", 8192, 2**20),
        ("qwen3-30b-a3b", 8192, 131072),
        ("qwen3-30b-a3b", 2048, 2**22),
        ("deepseek-v3", 131072, 65536),
        ("deepseek-v3", 4096, 2**20),
        ("llama-3.1-405b", 8192, 16384),
    ):
        for ledger in ("megatron", "fsdp2"):
            t, result = cpu(partial(search, model, 2**20, seq, batch, hardware=H100, accounting=ledger, top=10))
            label = f"search({model}, 1,048,576 GPUs, s = {seq:,}, B = {batch:,}, {ledger}, top=10)"
            print(f"{label}: {result.enumerated:,} plans, {len(result.ranked):,} ranked; {t:.2f} CPU-s")
            worst = max(worst, (t, label))
    print(f"slowest bounded search at MAX_GPUS: {worst[1]}, {worst[0]:.2f} CPU-s")
    for model in ("deepseek-v3", "llama-3.1-405b"):
        for gpus in (2048, 16384):
            for seq in (8192, 131072):
                for ledger in ("megatron", "fsdp2", "deepspeed", "lab"):
                    t, result = cpu(partial(search, model, gpus, seq, 2048, hardware=H100, accounting=ledger))
                    print(
                        f"search({model}, {gpus:,} GPUs, s = {seq:,}, {ledger}): {result.enumerated:,} plans, "
                        f"{len(result.ranked):,} kept; {t:.2f} CPU-s"
                    )
    result = search("deepseek-v3", 2048, 131072, 2048, hardware=H100, accounting="megatron")
    t, dicts = cpu(lambda: [c.to_dict(i) for i, c in enumerate(result.ranked, 1)])
    t_dump, text = cpu(lambda: json.dumps(dicts))
    print(
        f"search --json of every kept plan (deepseek-v3, 2,048 GPUs, s = 131,072, megatron): {len(result.ranked):,} "
        f"objects in {t:.2f} CPU-s, json.dumps {t_dump:.2f} CPU-s ({len(text) / 1e6:.0f} MB)"
    )
    argv = [sys.executable, "-m", "meshplan", "search", "--model", "deepseek-v3", "--gpus", "2048", "--seq", "131072",
            "--global-batch", "2048", "--hardware", H100, "--top", str(MAX_TOP), "--json"]  # fmt: skip
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    print(
        f"meshplan search --top {MAX_TOP:,} --json (deepseek-v3, 2,048 GPUs, s = 131,072, megatron), a new process: "
        f"{time.perf_counter() - t0:.2f} s of wall time, {len(out.stdout) / 1e6:.1f} MB"
    )


def bench_schedule() -> None:
    """The pipeline-schedule simulator at about its size bound (``schedule.MAX_FORWARDS`` forward passes)."""
    from meshplan import schedule

    for kind, p, m, v in (
        ("gpipe", 400, 500, 1),
        ("1f1b", 400, 500, 1),
        ("interleaved", 100, 1000, 2),
        ("zb-h1", 400, 500, 1),
        ("zb-h2", 200, 1000, 1),
        ("dualpipe", 200, 1000, 1),
        ("dualpipev", 200, 500, 1),
    ):
        t0 = time.perf_counter()
        t = schedule.simulate(kind, p, m, v)
        dt = time.perf_counter() - t0
        ops = sum(len(o) for o in schedule.orders(kind, p, m, v))
        print(
            f"simulate({kind}, p={p}, m={m}, v={v}): {ops:,} operations in {dt:.2f} s, "
            f"{ops / dt:,.0f} operations/s (bubble {t.bubble:.4f})"
        )


def bench_page_loads(repeat: int = 6) -> None:
    """Loading chapters of the built site in headless Chromium (tests/browser.py's, offline, a fresh context each
    time, as the browser tests do): seconds until site.js is done, and the CPU the whole machine spent on it
    (/proc/stat, both cores: Chromium's processes and this one). Needs `make book` (or book-stored) first."""
    sys.path.insert(0, str(ROOT / "tests"))
    from browser import DESKTOP, offline_context, site_url

    for page in ("notebooks/01_one_gpu.html", "notebooks/05_pipeline_parallel.html", "notebooks/08_4d_lab.html"):
        walls, cpus = [], []
        for _ in range(repeat):
            context, _blocked = offline_context(viewport=DESKTOP)
            b0, t0 = busy_s(), time.perf_counter()
            tab = context.new_page()
            tab.goto(site_url(page))
            tab.wait_for_function("document.documentElement.dataset.siteMath === 'ready'")
            walls.append(time.perf_counter() - t0)
            cpus.append(busy_s() - b0)
            context.close()
        print(
            f"page load {page} at 1366 px: median {statistics.median(walls):.2f} s to ready, "
            f"{statistics.median(cpus):.2f} core-s ({repeat} loads)"
        )


def bench_planner(repeat: int = 3) -> None:
    """The live planner (book/planner.html) in headless Chromium, served by a static server on 127.0.0.1 as a reader
    serves it (tests/test_browser_planner.py's server): the bytes the first Plan downloads (every response's body, the
    runtime and the wheel; Chromium's cache off, so each load counts them), the seconds from the press to the first
    result (the runtime's load included), then a plan, a search and an export once loaded. Needs the built site and
    its planner assets (make book or book-stored)."""
    import functools
    import http.server
    import threading

    sys.path.insert(0, str(ROOT / "tests"))
    from browser import DESKTOP, SITE_DIR, shared_chromium

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(SITE_DIR)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/book/planner.html"
    first: list[float] = []
    sizes: list[int] = []
    loaded: dict[str, list[float]] = {"plan": [], "search": [], "export": []}
    wait = "n => window.plannerTimings.runs.length >= n"
    for _ in range(repeat):
        context = shared_chromium().new_context(viewport=DESKTOP, service_workers="block")
        got: list[int] = []
        context.on("requestfinished", lambda r, got=got: got.append(r.sizes()["responseBodySize"]))
        tab = context.new_page()
        cdp = context.new_cdp_session(tab)
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        tab.goto(url)
        tab.select_option("#planner-model", "qwen3.8-27b")
        tab.fill("#planner-gpus", "64")
        tab.fill("#planner-tp", "4")
        tab.fill("#planner-pp", "4")
        tab.fill("#planner-global-batch", "256")
        tab.select_option("#planner-hardware", "h100-sxm-80gb")
        page_bytes = sum(got)
        t0 = time.perf_counter()
        tab.click("#planner-run")
        tab.wait_for_function(wait, arg=1, timeout=300_000)
        first.append(time.perf_counter() - t0)
        sizes.append(sum(got) - page_bytes)
        for n, (kind, button) in enumerate((("plan", "run"), ("search", "search"), ("export", "export")), 2):
            t0 = time.perf_counter()
            tab.click(f"#planner-{button}")
            tab.wait_for_function(wait, arg=n, timeout=300_000)
            loaded[kind].append(time.perf_counter() - t0)
        context.close()
    srv.shutdown()
    print(
        f"live planner: the first Plan downloads {statistics.median(sizes) / 1e6:.2f} MB and shows its result in "
        f"{statistics.median(first):.2f} s (median of {repeat} cold loads); then a plan "
        f"{statistics.median(loaded['plan']) * 1e3:.0f} ms (two runs: text and JSON), a search of Qwen3.8-27B on 64 "
        f"H100s {statistics.median(loaded['search']):.2f} s, an export "
        f"{statistics.median(loaded['export']) * 1e3:.0f} ms"
    )


def timed(cmd: list[str]) -> tuple[float, float]:
    """``(seconds, core-seconds)`` of ``cmd``, run as the Makefile runs it (bytecode caches allowed: the Makefile
    unexports PYTHONDONTWRITEBYTECODE). The core-seconds are the machine's busy time while it ran (``busy_s``): the
    command and everything it started, Chromium included, plus whatever else runs (run nothing else). On 2 cores the
    command cannot take less than half of them."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    b0, t0 = busy_s(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    wall, busy = time.perf_counter() - t0, busy_s() - b0
    if proc.returncode:
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        raise SystemExit(f"benchmark: {' '.join(cmd)} exited with {proc.returncode}; its last lines:\n{tail}")
    return wall, busy


def say(label: str, cmd: list[str]) -> float:
    """Run ``cmd`` (``timed``), print its seconds and core-seconds, return the core-seconds."""
    wall, busy = timed(cmd)
    print(f"{label}: {wall:.1f} s, {busy:.0f} core-s")
    return busy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="also time a clean book build and pytest")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each search timing (their median is printed)")
    ap.add_argument("--planner", action="store_true", help="only the live planner in Chromium (needs the built site)")
    ap.add_argument("--search", action="store_true", help="only the machine's speed and the searches")
    args = ap.parse_args()
    if args.planner:
        bench_planner()
        return 0
    if args.search:
        bench_machine()
        bench_search(args.repeat)
        return 0
    bench_machine()
    bench_plans()
    bench_search(args.repeat)
    bench_schedule()
    if args.full:
        pytest = [sys.executable, "-m", "pytest", "-q"]
        nbval = ["--nbval", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--nbval-cell-timeout=300"]
        plain = ["--nbval-current-env"]  # the Makefile's NBVAL: kernels of this environment
        part1 = ["-m", "not browser", "tests", "notebooks"]
        cores = os.cpu_count() or 1
        say("make check", ["make", "check"])
        part1_cpu = say("make test part 1 (pytest + strict nbval, no browser)", [*pytest, *nbval, *plain, *part1])
        say("make test part 2 (the site from stored outputs)", ["make", "book-stored"])
        browser = [*pytest, "-p", "no:nbval", "-m", "browser", "tests"]
        browser_cpu = say("make test part 3 (pytest -m browser)", browser)
        print(
            f"the pytest parts need {part1_cpu + browser_cpu:.0f} core-s: on {cores} cores no schedule runs them in "
            f"less than {(part1_cpu + browser_cpu) / cores:.0f} s (part 1 alone: {part1_cpu / cores:.0f} s)"
        )
        # What part 1's CPU is spent on: each group in one process (-n 0), so nothing runs twice for a second worker.
        one, no_nbval = [*pytest, "-n", "0"], ["-p", "no:nbval"]
        unit, slow = (
            [*one, *no_nbval, "-m", "not browser and not slow", "tests"],
            [*one, *no_nbval, "-m", "slow and not browser", "tests"],
        )
        groups = {
            "unit, property, CLI and doctest tests (make check's set, all hypothesis examples)": unit,
            "real PyTorch runs, transformers families, figures, typesetting": slow,
            "strict nbval of the twelve notebooks": [*one, *nbval, *plain, "notebooks"],
        }
        total = 0.0
        for label, cmd in groups.items():
            total += say(f"  part 1, {label}, one process", cmd)
        print(f"  part 1's groups in one process each: {total:.0f} core-s; with two workers: {part1_cpu:.0f} core-s")
        bench_page_loads()
        bench_planner()
        shutil.rmtree(ROOT / "_build", ignore_errors=True)
        say("clean book build (make book)", ["make", "book"])
        bench_machine()
    return 0


if __name__ == "__main__":
    sys.exit(main())
