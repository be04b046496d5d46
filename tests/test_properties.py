"""Property tests (hypothesis, derandomized): invariants of thousands of random valid plans and meshes.

Plans are drawn valid by construction: a shipped model, tp from the divisors that pass the head checks,
pp from the divisors of the layers, virtual stages with pp·v | L and m ≥ p, cp a small power of 2 dividing
the sequence, ep (DeepSeek-V3) dividing the experts and dp·cp. Each invariant is checked against formulas
written here, independently of ``meshplan.plan``. The meshes are compared with a brute-force grid built
with ``itertools.product``.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from meshplan import Mesh, Plan, available_models, evaluate, load_model
from meshplan.activations import RECOMPUTE_MODES
from meshplan.mesh import AXES, DEFAULT_ORDER, MEGATRON_ORDER
from meshplan.plan import DIMS
from meshplan.zero import STAGE_SHARDS

SPECS = {name: load_model(name) for name in available_models()}
NAMES = sorted(SPECS)
BW = {"nvlink": 160e9, "infiniband": 50e9}


def _settings(n: int):
    return settings(max_examples=n, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_ok(spec, t: int) -> bool:
    kv = spec.num_key_value_heads
    return (spec.num_attention_heads % t == 0
            and (kv % t == 0 or t % kv == 0)
            and all(h % t == 0 for h in (spec.linear_num_key_heads, spec.linear_num_value_heads) if h))


TPS = {name: [t for t in divisors(s.num_attention_heads) if _tp_ok(s, t)] for name, s in SPECS.items()}


def close(a: float, b: float, rel: float = 1e-12) -> bool:
    return a == b or math.isclose(a, b, rel_tol=rel)


@st.composite
def plan_kwargs(draw, doubling_tp: bool = False):
    """Keyword arguments of a valid ``Plan`` (world size ≤ 1,024).

    Hypothesis draws the model and one 32-bit seed; the other choices come from ``random.Random(seed)``
    (one draw per plan instead of seventeen keeps thousands of plans within the time budget). The plan is
    attached with ``note`` so a failure prints it.
    """
    name = draw(st.sampled_from(NAMES))
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    spec = SPECS[name]
    tps = [t for t in TPS[name] if 2 * t in TPS[name]] if doubling_tp else TPS[name]
    tp = rnd.choice(tps)
    L = spec.num_layers
    pp = rnd.choice([d for d in divisors(L) if tp * d <= 128])
    v = rnd.choice([v for v in (1, 2, 3, 4) if L % (pp * v) == 0 and (v == 1 or pp > 1)])
    m = rnd.randint(pp if v > 1 else 1, 64)
    seq = rnd.choice([1024, 4096, 8192, 131072])
    cp = rnd.choice([c for c in (1, 2, 4, 8) if seq % c == 0 and tp * pp * c <= 256])
    dp = rnd.randint(1, max(1, min(12, 512 // (tp * pp * cp))))
    ep = 1
    if spec.is_moe:
        ep = rnd.choice([e for e in divisors(spec.num_experts) if (dp * cp) % e == 0])
    gpus = tp * pp * cp * dp
    kw = dict(
        model=spec, gpus=gpus, tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, virtual_stages=v, micro_batches=m, seq=seq,
        zero=rnd.randint(0, 3), recompute=rnd.choice(RECOMPUTE_MODES), micro_batch_size=rnd.randint(1, 4),
        sp=rnd.choice([None, True, False]), order=rnd.choice([DEFAULT_ORDER, MEGATRON_ORDER]),
        gpus_per_node=math.gcd(gpus, rnd.choice([1, 2, 4, 8, 16])),
        stage_balance=rnd.choice(["even", "even", "max"]), gpu_memory_bytes=rnd.choice([24e9, 80e9, 141e9]),
    )
    note(f"plan: {name} " + ", ".join(f"{k}={v!r}" for k, v in kw.items() if k != "model"))
    return kw


def expected_activations(plan: Plan) -> float:
    """Korthikanti Table 2 × the first stage's in-flight layers ÷ c, written out here."""
    spec = plan.model
    s, b, h, a, t = plan.seq, plan.micro_batch_size, spec.hidden_size, spec.num_attention_heads, plan.tp
    p, m, v, c = plan.pp, plan.micro_batches, plan.virtual_stages, plan.cp
    sp = t > 1 if plan.sp is None else plan.sp
    if plan.recompute == "full":
        per = 2 * s * b * h / (t if sp else 1)
    else:
        core = 34 / t if (sp or t == 1) else 10 + 24 / t
        per = s * b * h * (core + (0 if plan.recompute == "selective" else 5 * a * s / (h * t)))
    inflight = spec.num_layers / p * min(m, p) * ((1 + (p - 1) / (p * v)) if v > 1 else 1)
    return per * inflight / c


def expected_comm(plan: Plan, stage_params: tuple[float, float]) -> dict[str, float]:
    """Bytes per GPU per step by dimension, from the conventions in the module docstrings.

    ``stage_params`` = (dense, routed-expert) parameters of this GPU's pipeline stage before the TP/EP split.
    """
    spec = plan.model
    t, c, p, d, e = plan.tp, plan.cp, plan.pp, plan.dp, plan.ep
    s, b, h, m, v = plan.seq, plan.micro_batch_size, spec.hidden_size, plan.micro_batches, plan.virtual_stages
    k = 3 if plan.zero == 3 else 2  # gradient-sized transfers (ZeRO-3: 3(n-1)/n)
    g_dense = 2 * stage_params[0] / t
    g_exp = 2 * stage_params[1] / (t * e)
    out = {dim: 0.0 for dim in DIMS}
    out["cp"] = k * (c - 1) / c * g_dense
    out["dp"] = k * (d - 1) / d * g_dense / c
    edp = d * c // e
    out["dp" if d > 1 else "cp"] += k * (edp - 1) / edp * g_exp
    layers_here = spec.num_layers // p
    tokens = s // c * b
    if t > 1:
        out["tp"] = 4 * 2 * (t - 1) / t * tokens * h * 2 * layers_here * m
    if p > 1:
        out["pp"] = 2 * v * tokens * h * 2 * m
    if c > 1:
        kv_gpu = spec.kv_width * max(spec.num_key_value_heads // t, 1) // spec.num_key_value_heads
        full_here = spec.num_full_attention_layers * layers_here // spec.num_layers
        out["cp"] += (c - 1) / c * s * b * kv_gpu * 2 * full_here * m
    if e > 1:
        moe_here = spec.num_moe_layers * layers_here // spec.num_layers
        ep_tokens = tokens / t if plan.sequence_parallel else tokens  # SP: each TP rank dispatches its shard
        out["ep"] = 4 * (e - 1) / e * ep_tokens * spec.experts_per_token * h * 2 * moe_here * m
    return out


def even_stage_params(plan: Plan) -> tuple[float, float]:
    experts = plan.model.routed_expert_params
    return (plan.model.params.total - experts) / plan.pp, experts / plan.pp


def test_tp_choices_are_exactly_the_valid_ones():
    assert TPS == {"deepseek-v3": [1, 2, 4, 8, 16, 32, 64, 128], "llama-3.1-405b": [1, 2, 4, 8, 16, 32, 64, 128],
                   "llama-3.1-70b": [1, 2, 4, 8, 16, 32, 64], "llama-3.1-8b": [1, 2, 4, 8, 16, 32],
                   "qwen3.8-27b": [1, 2, 4, 8], "small-3.7m": [1, 2, 4]}
    for name, spec in SPECS.items():
        for t in range(1, 2 * spec.num_attention_heads + 1):
            if t in TPS[name]:
                assert Plan(model=spec, gpus=t, tp=t, gpus_per_node=t).tp == t
            else:
                try:
                    Plan(model=spec, gpus=t, tp=t, gpus_per_node=t)
                except ValueError as exc:
                    assert str(exc).startswith(f"tp={t} does not divide "), exc
                else:
                    raise AssertionError(f"{name}: tp={t} accepted")


# ---------------------------------------------------------------- invariants of every plan
@_settings(2000)
@given(plan_kwargs())
def test_report_invariants(kw):
    plan = Plan(**kw)
    r = evaluate(plan)
    mem = r.memory_bytes
    # parts sum to the total; the named terms sum to the model states
    assert set(mem) == {"model_states", "activations", "total"}
    assert close(mem["model_states"] + mem["activations"], mem["total"])
    assert close(sum(r.model_states_terms.values()), mem["model_states"])
    assert set(r.model_states_terms) == {"weights", "grads", "master", "adam_m", "adam_v"}
    assert r.fits == (mem["total"] <= plan.gpu_memory_bytes)
    assert close(mem["activations"], expected_activations(plan))
    # the mesh has the world size; every dimension of size 1 sends nothing and has no link
    assert plan.mesh.world_size == plan.gpus
    sizes = {"dp": plan.dp, "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "ep": plan.ep}
    assert set(r.comm_bytes_per_step) == set(r.link) == set(r.comm_time_s) == set(DIMS)
    for dim in DIMS:
        if sizes[dim] == 1:
            assert r.comm_bytes_per_step[dim] == 0, dim
            assert r.link[dim] is None, dim
            assert r.comm_time_s[dim] == 0, dim
        else:
            assert r.link[dim] in ("nvlink", "infiniband"), dim
            assert r.link[dim] == plan.mesh.link(dim)
            assert close(r.comm_time_s[dim], r.comm_bytes_per_step[dim] / BW[r.link[dim]]), dim
            if dim != "ep":  # a pipeline stage may hold no MoE layer
                assert r.comm_bytes_per_step[dim] > 0, dim
    if plan.stage_balance == "even":
        want = expected_comm(plan, even_stage_params(plan))
        for dim in DIMS:
            assert close(r.comm_bytes_per_step[dim], want[dim]), dim
    # bubble
    p, m, v = plan.pp, plan.micro_batches, plan.virtual_stages
    if p == 1:
        assert r.bubble == 0 and r.bubble_share == 0
    else:
        assert close(r.bubble, (p - 1) / (m * v))
        assert close(r.bubble_share, (p - 1) / (m * v + p - 1))


@_settings(1000)
@given(plan_kwargs())
def test_model_states_terms_follow_the_zero_stage(kw):
    """Each term is params/GPU × its bytes, ÷ (dp·cp) when the stage shards it; ZeRO-3 × dp·cp = stage 0."""
    plan = Plan(**kw)
    dc = plan.dp * plan.cp
    reports = {z: evaluate(replace(plan, zero=z)) for z in range(4)}
    s0, s3 = reports[0].memory_bytes["model_states"], reports[3].memory_bytes["model_states"]
    if plan.ep == 1:
        assert close(s3 * dc, s0, 1e-9)
        per_gpu = reports[0].params_per_gpu
        if plan.stage_balance == "even":
            assert close(per_gpu, plan.model.params.total / (plan.tp * plan.pp))
        for z, r in reports.items():
            for name, b in plan.bytes_per_param.terms().items():
                want = per_gpu * b / (dc if name in STAGE_SHARDS[z] else 1)
                assert close(r.model_states_terms[name], want), (z, name)
    # more sharding never costs memory
    assert s0 >= reports[1].memory_bytes["model_states"] >= reports[2].memory_bytes["model_states"] >= s3


@_settings(800)
@given(plan_kwargs(doubling_tp=True))
def test_doubling_tp_halves_every_tp_split_term(kw):
    """plan(tp) vs plan(2·tp) on twice the GPUs: model-state terms halve; with SP so do activations."""
    one = Plan(**{**kw, "sp": True})
    two = Plan(**{**kw, "sp": True, "tp": 2 * kw["tp"], "gpus": 2 * kw["gpus"]})
    r1, r2 = evaluate(one), evaluate(two)
    for name, x in r1.model_states_terms.items():
        assert close(r2.model_states_terms[name], x / 2), name
    assert close(r2.memory_bytes["model_states"], r1.memory_bytes["model_states"] / 2)
    assert close(r2.params_per_gpu, r1.params_per_gpu / 2)
    assert close(r2.memory_bytes["activations"], r1.memory_bytes["activations"] / 2)
    # without sequence parallelism full recompute keeps the whole layer input: unchanged by tp
    if kw["recompute"] == "full" and kw["tp"] > 1:
        a1 = evaluate(replace(one, sp=False)).memory_bytes["activations"]
        a2 = evaluate(replace(two, sp=False)).memory_bytes["activations"]
        assert close(a1, a2)


@_settings(600)
@given(plan_kwargs(), st.integers(1, 64))
def test_bubble_falls_as_micro_batches_grow(kw, extra):
    plan = Plan(**kw)
    more = replace(plan, micro_batches=plan.micro_batches + extra)
    b1, b2 = evaluate(plan).bubble, evaluate(more).bubble
    if plan.pp == 1:
        assert b1 == b2 == 0
    else:
        assert 0 < b2 < b1


# ---------------------------------------------------------------- the mesh against brute force
class BruteMesh:
    """Rank ↔ coordinates by enumerating the grid, outermost axis first (itertools.product)."""

    def __init__(self, sizes: dict, order: str, gpn: int, ep: int):
        inner_to_outer = [a for a in order.split("-") if a != "ep"]
        outer_to_inner = inner_to_outer[::-1]
        self.coords = [dict(zip(outer_to_inner, combo))
                       for combo in itertools.product(*(range(sizes[a]) for a in outer_to_inner))]
        self.rank_of = {tuple(c[a] for a in AXES): r for r, c in enumerate(self.coords)}
        self.sizes, self.gpn, self.ep = sizes, gpn, ep

    def group(self, rank: int, axis: str) -> tuple[int, ...]:
        c = self.coords[rank]
        if axis == "ep":
            members = [q for q, d in enumerate(self.coords) if d["tp"] == c["tp"] and d["pp"] == c["pp"]]
            k = members.index(rank) // self.ep
            return tuple(members[k * self.ep:(k + 1) * self.ep])
        return tuple(self.rank_of[tuple(i if a == axis else c[a] for a in AXES)] for i in range(self.sizes[axis]))

    def link(self, axis: str):
        n = self.ep if axis == "ep" else self.sizes[axis]
        if n == 1:
            return None
        one_node = all(len({q // self.gpn for q in self.group(r, axis)}) == 1 for r in range(len(self.coords)))
        return "nvlink" if one_node else "infiniband"


@st.composite
def meshes(draw):
    sizes = {a: draw(st.sampled_from([1, 1, 2, 3, 4])) for a in ("tp", "cp", "pp")}
    sizes["dp"] = draw(st.integers(1, 6))
    order = draw(st.sampled_from([DEFAULT_ORDER, MEGATRON_ORDER, "dp-pp-cp-tp", "pp-tp-dp-cp", "cp-dp-ep-tp-pp"]))
    gpn = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]))
    ep = draw(st.sampled_from(divisors(sizes["dp"] * sizes["cp"])))
    return sizes, order, gpn, ep


@_settings(400)
@given(meshes())
def test_mesh_matches_brute_force(args):
    sizes, order, gpn, ep = args
    mesh = Mesh(sizes, order, gpus_per_node=gpn, ep=ep)
    brute = BruteMesh(sizes, order, gpn, ep)
    world = math.prod(sizes.values())
    assert mesh.world_size == world == len(brute.coords)
    for r in range(world):
        c = mesh.coords(r)
        assert c == brute.coords[r]
        assert mesh.rank(**c) == r
    for axis in (*AXES, "ep"):
        size = ep if axis == "ep" else sizes[axis]
        groups = mesh.groups(axis)
        # every group has the axis' size, and the groups partition the ranks
        assert all(len(g) == size for g in groups), axis
        assert sorted(q for g in groups for q in g) == list(range(world)), axis
        assert [g[0] for g in groups] == sorted(g[0] for g in groups)
        for r in range(world):
            g = mesh.group(r, axis)
            assert r in g
            assert g == brute.group(r, axis), (axis, r)
        assert mesh.link(axis) == brute.link(axis), axis


def test_mesh_links_with_unaligned_nodes():
    """gpus_per_node that does not align with the strides: groups straddle node boundaries."""
    # tp = 4 on nodes of 6: ranks 4, 5 | 6, 7 straddle
    m = Mesh({"tp": 4, "cp": 1, "pp": 1, "dp": 3}, DEFAULT_ORDER, gpus_per_node=6)
    assert m.group(4, "tp") == (4, 5, 6, 7) and m.link("tp") == "infiniband"
    # tp = 3 on nodes of 6 aligns; dp stride 3 on nodes of 12: groups of 4 consecutive tp blocks
    m = Mesh({"tp": 3, "cp": 1, "pp": 1, "dp": 4}, DEFAULT_ORDER, gpus_per_node=12)
    assert m.link("tp") == "nvlink" and m.link("dp") == "nvlink"
    m = Mesh({"tp": 2, "cp": 1, "pp": 1, "dp": 4}, DEFAULT_ORDER, gpus_per_node=6)
    assert m.groups("dp") == [(0, 2, 4, 6), (1, 3, 5, 7)] and m.link("dp") == "infiniband"
    assert m.link("tp") == "nvlink"


def test_style_example_megatron_vs_llama_order():
    sizes = {"tp": 2, "cp": 1, "pp": 4, "dp": 2}
    megatron = Mesh(sizes, MEGATRON_ORDER, gpus_per_node=8)
    assert megatron.groups("dp") == [(0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15)]
    assert megatron.groups("pp") == [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)]
    assert megatron.groups("tp") == [(2 * i, 2 * i + 1) for i in range(8)]
    assert (megatron.link("tp"), megatron.link("dp"), megatron.link("pp")) == ("nvlink", "nvlink", "infiniband")
    llama = Mesh(sizes, DEFAULT_ORDER, gpus_per_node=8)
    assert llama.groups("dp") == [(i, i + 8) for i in range(8)]
    assert llama.groups("pp") == [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)]
    assert (llama.link("tp"), llama.link("dp"), llama.link("pp")) == ("nvlink", "infiniband", "nvlink")
    assert llama.coords(11) == {"tp": 1, "cp": 0, "pp": 1, "dp": 1}
    assert megatron.coords(11) == {"tp": 1, "cp": 0, "pp": 2, "dp": 1}


def test_ep_groups_fold_inside_dp_times_cp():
    m = Mesh({"tp": 2, "cp": 2, "pp": 1, "dp": 4}, DEFAULT_ORDER, gpus_per_node=8, ep=4)
    # ranks sharing tp = 0: 0, 2, 4, ..., 14 (cp inner, dp outer), cut into runs of 4
    assert m.groups("ep") == [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)]
    assert m.link("ep") == "nvlink"
    assert m.world_size == 16
