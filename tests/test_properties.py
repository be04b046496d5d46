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

from conftest import examples
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from meshplan import DEFAULT_BPP, FSDP2_BPP, MEGATRON_BPP, Mesh, Plan, available_models, evaluate, load_model
from meshplan.parallel.activations import RECOMPUTE_MODES
from meshplan.parallel.zero import STAGE_SHARDS
from meshplan.plan import TRAFFIC
from meshplan.spec.mesh import AXES, DEFAULT_ORDER, MEGATRON_ORDER
from meshplan.spec.stages import spread_layers

SPECS = {name: load_model(name) for name in available_models()}
NAMES = sorted(SPECS)
BW = {"nvlink": 160e9, "infiniband": 50e9}


def _settings(n: int):
    return settings(
        max_examples=examples(n),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_ok(spec, t: int) -> bool:
    kv = spec.num_key_value_heads
    return (
        spec.num_attention_heads % t == 0
        and (kv % t == 0 or t % kv == 0)
        and all(h % t == 0 for h in (spec.linear_num_key_heads, spec.linear_num_value_heads) if h)
    )


TPS = {name: [t for t in divisors(s.num_attention_heads) if _tp_ok(s, t)] for name, s in SPECS.items()}


def close(a: float, b: float, rel: float = 1e-12) -> bool:
    return a == b or math.isclose(a, b, rel_tol=rel)


@st.composite
def plan_kwargs(draw, doubling_tp: bool = False, accounting: str | None = "lab"):
    """Keyword arguments of a valid ``Plan.create`` (world size ≤ 1,024), covering equal and uneven pipeline
    stages, expert tensor parallelism, the bytes-per-parameter variants and (with ``accounting=None``) every
    ledger.

    Hypothesis draws the model and one 32-bit seed; the other choices come from ``random.Random(seed)``
    (one draw per plan instead of twenty keeps thousands of plans within the time budget). The plan is
    attached with ``note`` so a failure prints it.
    """
    name = draw(st.sampled_from(NAMES))
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    spec = SPECS[name]
    acc = accounting or rnd.choice(["lab", "lab", "megatron", "fsdp2", "deepspeed"])
    tps = [t for t in TPS[name] if 2 * t in TPS[name]] if doubling_tp else TPS[name]
    if acc != "lab":  # the engines split the KV heads evenly over TP; Megatron-Core also runs TP a multiple of them
        kv = spec.num_key_value_heads
        tps = [t for t in tps if kv % t == 0 or (acc == "megatron" and t % kv == 0)] or [1]
    tp = rnd.choice(tps)
    L = spec.num_layers
    uneven = not doubling_tp and rnd.random() < 0.25
    pps = [d for d in range(1, L + 1) if tp * d <= 128 and (uneven or L % d == 0)]
    if acc == "fsdp2" and spec.tie_word_embeddings:  # torchtitan refuses a tied head with pipeline parallelism
        pps = [1]
    pp = rnd.choice(pps)
    lps = spread_layers(L, pp) if uneven and L % pp else None
    vs = [v for v in (1, 2, 3, 4) if (v == 1 or pp > 1) and (L % (pp * v) == 0 if lps is None else min(lps) >= v)]
    v = rnd.choice(vs)
    m = rnd.randint(pp if v > 1 else 1, 64)
    seq = rnd.choice([1024, 4096, 8192, 131072])
    # the megatron ledger (Megatron-Core) splits Gated DeltaNet heads over TP x CP: CP sizes it takes
    heads = [h for h in (spec.linear_num_key_heads, spec.linear_num_value_heads) if h] if acc == "megatron" else []
    cp = rnd.choice(
        [
            c
            for c in (1, 2, 4, 8)
            if seq % c == 0 and tp * pp * c <= 256 and (c == 1 or all(h % (tp * c) == 0 for h in heads))
        ]
    )
    dp = rnd.randint(1, max(1, min(12, 512 // (tp * pp * cp))))
    ep, etp = 1, None
    if spec.is_moe:
        if not doubling_tp and rnd.random() < 0.4:
            etp = rnd.choice(divisors(tp))
        e_tp = tp if etp is None else etp
        room = dp * cp if e_tp == tp else tp * cp * dp // e_tp
        ep = rnd.choice([e for e in divisors(spec.num_experts) if room % e == 0])
    gpus = tp * pp * cp * dp
    zeros = [z for z in range(4) if not (acc == "fsdp2" and z == 1) and not (acc == "deepspeed" and z >= 2 and pp > 1)]
    kw = {
        "model": spec,
        "gpus": gpus,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "dp": dp,
        "ep": ep,
        "expert_tp": etp,
        "virtual_stages": v,
        "micro_batches": m,
        "seq": seq,
        "zero": rnd.choice(zeros),
        "recompute": rnd.choice(RECOMPUTE_MODES),
        "micro_batch_size": rnd.randint(1, 4),
        "sp": rnd.choice([None, True, False]),
        "order": rnd.choice([DEFAULT_ORDER, MEGATRON_ORDER]),
        "gpus_per_node": math.gcd(gpus, rnd.choice([1, 2, 4, 8, 16])),
        "layers_per_stage": lps,
        "stage_balance": rnd.choice(["even", "even", "max"]),
        "gpu_memory_bytes": rnd.choice([24e9, 80e9, 141e9]),
        "accounting": acc,
    }
    if acc == "lab":
        kw["bytes_per_param"] = rnd.choice([DEFAULT_BPP, DEFAULT_BPP, MEGATRON_BPP, FSDP2_BPP])
    note(f"plan: {name} " + ", ".join(f"{k}={v!r}" for k, v in kw.items() if k != "model"))
    return kw


def stage_params(plan: Plan) -> list[tuple[float, float]]:
    """(dense, routed-expert) parameters of every pipeline stage before the TP/EP split, written out here:
    equal stages with "even" hold 1/p of everything; otherwise each stage its own layers plus either 1/p of the
    rest ("even") or the embedding and vision tower (first stage) and head, final norm, MTP module (last)."""
    spec = plan.model
    p, L = plan.pp, spec.num_layers
    lexp = spec.layer_expert_params or (0,) * L
    experts = spec.routed_expert_params
    if plan.layers_per_stage is None and plan.stage_balance == "even":
        return [((spec.params.total - experts) / p, experts / p)] * p
    comps, extra = spec.params.components, spec.params.extra
    final_norm = {n: c * x for n, c, x in spec.params.groups}.get("final_norm", 0)
    mtp = comps["mtp"] + extra.get("mtp", 0)
    mtp_exp = max(lexp) if (mtp and spec.is_moe) else 0
    out, start = [], 0
    for k, n in enumerate(plan.stage_layers):
        layers = range(start, start + n)
        start += n
        dense: float = sum(spec.layer_params[i] - lexp[i] for i in layers)
        exp = sum(lexp[i] for i in layers)
        if plan.stage_balance == "even":
            dense += (spec.params.total - sum(spec.layer_params)) / p
        else:
            dense += comps["embedding"] + comps["vision"] if k == 0 else 0
            dense += comps["head"] + final_norm + mtp - mtp_exp if k == p - 1 else 0
            exp += mtp_exp if k == p - 1 else 0
        out.append((float(dense), float(exp)))
    return out


def per_layer_activations(plan: Plan) -> float:
    """Korthikanti Table 2 for one layer and one micro-batch, written out here."""
    spec = plan.model
    s, b, h, a, t = plan.seq, plan.micro_batch_size, spec.hidden_size, spec.num_attention_heads, plan.tp
    sp = t > 1 if plan.sp is None else plan.sp
    if plan.recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    core = 34 / t if (sp or t == 1) else 10 + 24 / t
    return s * b * h * (core + (0 if plan.recompute == "selective" else 5 * a * s / (h * t)))


def expected_stage_memory(plan: Plan) -> list[float]:
    """Every stage's own model states (lab ledger) plus its own activations: layers × min(m, p − k) in flight,
    × (1 + (p−1)/(p·v)) when interleaved, ÷ c."""
    t, c, p, d, e, etp = plan.tp, plan.cp, plan.pp, plan.dp, plan.ep, plan.etp
    bpp, z = plan.bytes_per_param, plan.zero
    edp = plan.expert_dp if (e > 1 or etp != t) else d * c
    factor = (1 + (p - 1) / (p * plan.virtual_stages)) if plan.virtual_stages > 1 else 1
    out = []
    for k, ((dense, exp), n) in enumerate(zip(stage_params(plan), plan.stage_layers)):
        states = sum(
            b
            * (
                dense / t / (d * c if name in STAGE_SHARDS[z] else 1)
                + exp / (etp * e) / (edp if name in STAGE_SHARDS[z] else 1)
            )
            for name, b in bpp.terms().items()
        )
        out.append(states + per_layer_activations(plan) * n * min(plan.micro_batches, p - k) * factor / c)
    return out


def expected_comm(plan: Plan) -> dict[str, float]:
    """Bytes per GPU per step by key for the lab ledger with equal stages, from the conventions in the module
    docstrings (the stage with the most layers; here every stage is equal)."""
    spec = plan.model
    t, c, p, d, e = plan.tp, plan.cp, plan.pp, plan.dp, plan.ep
    s, b, h, m, v = plan.seq, plan.micro_batch_size, spec.hidden_size, plan.micro_batches, plan.virtual_stages
    k = 3 if plan.zero == 3 else 2  # gradient-sized transfers (ZeRO-3: 3(n-1)/n)
    dense, exp = stage_params(plan)[0]
    separate = e > 1 or plan.etp != t
    g_dense = 2 * (dense / t + (0 if separate else exp / (plan.etp * e)))
    g_exp = 2 * exp / (plan.etp * e) if separate else 0.0
    out = dict.fromkeys(TRAFFIC, 0.0)
    out["cp"] = k * (c - 1) / c * g_dense
    out["dp"] = k * (d - 1) / d * g_dense / c
    edp = plan.expert_dp
    out["edp"] = k * (edp - 1) / edp * g_exp
    layers_here = spec.num_layers // p
    lexp = spec.layer_expert_params or (0,) * spec.num_layers
    moe = [sum(1 for i in range(k * layers_here, (k + 1) * layers_here) if lexp[i]) for k in range(p)]
    here = max(range(p), key=lambda k: (moe[k], -k))  # equal stages: the one with the most MoE layers
    tokens = s // c * b
    if t > 1:
        out["tp"] = 4 * 2 * (t - 1) / t * tokens * h * 2 * layers_here * m
    if p > 1:
        out["pp"] = 2 * v * tokens * h * 2 * m
    if c > 1:
        kv_gpu = spec.kv_width * max(spec.num_key_value_heads // t, 1) / spec.num_key_value_heads
        full_here = plan.stages[here].full_attention_layers
        out["cp"] += (c - 1) / c * s * b * kv_gpu * 2 * full_here * m
    if e > 1:
        moe_here = moe[here]
        ep_tokens = tokens / t if plan.sequence_parallel else tokens  # SP: each TP rank dispatches its shard
        out["ep"] = 4 * (e - 1) / e * ep_tokens * spec.experts_per_token * h * 2 * moe_here * m
    return out


def test_tp_choices_are_exactly_the_valid_ones():
    known = {
        "deepseek-v3": [1, 2, 4, 8, 16, 32, 64, 128],
        "llama-3.1-405b": [1, 2, 4, 8, 16, 32, 64, 128],
        "llama-3.1-70b": [1, 2, 4, 8, 16, 32, 64],
        "llama-3.1-8b": [1, 2, 4, 8, 16, 32],
        "qwen3.8-27b": [1, 2, 4, 8],
        "small-3.7m": [1, 2, 4],
    }
    assert {k: TPS[k] for k in known} == known
    for name, spec in SPECS.items():
        for t in range(1, 2 * spec.num_attention_heads + 1):
            if t in TPS[name]:
                assert Plan.create(spec, gpus=t, tp=t, gpus_per_node=t).tp == t
            else:
                try:
                    Plan.create(spec, gpus=t, tp=t, gpus_per_node=t)
                except ValueError as exc:
                    assert str(exc).startswith(f"tp={t} does not divide "), exc
                else:
                    raise AssertionError(f"{name}: tp={t} accepted")


# ---------------------------------------------------------------- invariants of every plan
def sizes_of(plan: Plan) -> dict[str, int]:
    """The group size behind each traffic key; the expert-DP sync is its own group only when EP > 1 or expert
    TP ≠ TP (otherwise the experts sync with the dense gradients)."""
    separate = plan.model.is_moe and (plan.ep > 1 or plan.etp != plan.tp)
    return {
        "dp": plan.dp,
        "tp": plan.tp,
        "pp": plan.pp,
        "cp": plan.cp,
        "ep": plan.ep,
        "edp": plan.expert_dp if separate else 1,
    }


@_settings(1500)
@given(plan_kwargs(accounting=None))
def test_report_invariants(kw):
    plan = Plan.create(**kw)
    r = evaluate(plan)
    mem = r.memory_bytes
    # parts sum to the total; the named terms sum to the model states
    assert set(mem) == {"model_states", "activations", "total", "peak_allocated", "peak_reserved", "headroom"}
    assert close(mem["model_states"] + mem["activations"], mem["total"])
    assert close(sum(r.model_states_terms.values()), mem["model_states"])
    # the peak is the largest moment of the stage that peaks; the floor the search prunes on is below it
    assert len(r.by_stage) == plan.pp and [sp.index for sp in r.by_stage] == list(range(plan.pp))
    assert mem["peak_allocated"] == max(sp.peak.total for sp in r.by_stage)
    assert all(sp.peak.total == max(m.total for m in sp.moments) for sp in r.by_stage)
    assert r.memory_floor <= mem["peak_allocated"] * (1 + 1e-12)
    assert all(v >= 0 for sp in r.by_stage for m in sp.moments for v in m.values)
    if plan.accounting.name == "lab":
        assert close(mem["peak_allocated"], mem["total"]) and mem["peak_reserved"] == mem["peak_allocated"]
        assert r.fits == (mem["total"] <= plan.gpu_memory_bytes)
    else:
        # the optimizer step comes last; the verdict is the headroom's and the floor's
        room = r.headroom
        assert room is not None
        assert all(sp.moments[-1].name == "optimizer step" for sp in r.by_stage)
        assert close(mem["peak_reserved"], mem["peak_allocated"] * room.reserved_ratio)
        floor_fits = r.memory_floor * room.reserved_ratio + room.outside <= room.usable
        assert r.fits == (mem["headroom"] >= 0 and floor_fits)
    if plan.accounting.name == "lab":
        assert set(r.model_states_terms) == {"weights", "grads", "master", "adam_m", "adam_v"}
        # the reported memory is the most-loaded stage's own states plus its own activations
        per_stage = expected_stage_memory(plan)
        assert close(mem["total"], max(per_stage), 1e-9)
        assert close(per_stage[r.stage], max(per_stage), 1e-9)
    # the mesh has the world size; every group of size 1 sends nothing and has no link
    assert plan.mesh.world_size == plan.gpus
    sizes = sizes_of(plan)
    assert set(r.comm_bytes_per_step) == set(r.link) == set(r.comm_time_s) == set(TRAFFIC)
    for key in TRAFFIC:
        if sizes[key] == 1:
            assert r.comm_bytes_per_step[key] == 0, key
            assert r.link[key] is None, key
            assert r.comm_time_s[key] == 0, key
        else:
            link = r.link[key]
            assert link in ("nvlink", "infiniband"), key
            assert link == plan.mesh.link(key), key
            assert close(r.comm_time_s[key], r.comm_bytes_per_step[key] / BW[link]), key
            if key not in ("ep", "edp"):  # a pipeline stage may hold no MoE layer
                assert r.comm_bytes_per_step[key] > 0, key
    if plan.accounting.name == "lab" and plan.layers_per_stage is None and plan.stage_balance == "even":
        want = expected_comm(plan)
        for key in TRAFFIC:
            assert close(r.comm_bytes_per_step[key], want[key]), key
    # bubble
    p, m, v = plan.pp, plan.micro_batches, plan.virtual_stages
    if p == 1:
        assert r.bubble == 0 and r.bubble_share == 0
    else:
        assert close(r.bubble, (p - 1) / (m * v))
        assert close(r.bubble_share, (p - 1) / (m * v + p - 1))


@_settings(800)
@given(plan_kwargs())
def test_model_states_terms_follow_the_zero_stage(kw):
    """Each term is params/GPU × its bytes, ÷ (dp·cp) when the stage shards it; ZeRO-3 × dp·cp = stage 0."""
    plan = Plan.create(**kw)
    dc = plan.dp * plan.cp
    reports = {z: evaluate(plan.replace(zero=z)) for z in range(4)}
    s0, s3 = reports[0].memory_bytes["model_states"], reports[3].memory_bytes["model_states"]
    if plan.ep == 1 and plan.etp == plan.tp and plan.layers_per_stage is None and plan.stage_balance == "even":
        assert close(s3 * dc, s0, 1e-9)
        per_gpu = reports[0].params_per_gpu
        assert close(per_gpu, plan.model.params.total / (plan.tp * plan.pp))
        for z, r in reports.items():
            for name, b in plan.bytes_per_param.terms().items():
                want = per_gpu * b / (dc if name in STAGE_SHARDS[z] else 1)
                assert close(r.model_states_terms[name], want), (z, name)
    # more sharding never costs memory (every stage's own memory falls, so their maximum does)
    totals = [reports[z].memory_bytes["total"] for z in range(4)]
    assert totals == sorted(totals, reverse=True)


@_settings(600)
@given(plan_kwargs(doubling_tp=True))
def test_doubling_tp_halves_every_tp_split_term(kw):
    """plan(tp) vs plan(2·tp) on twice the GPUs: model-state terms halve; with SP so do activations."""
    one = Plan.create(**{**kw, "sp": True})
    two = Plan.create(**{**kw, "sp": True, "tp": 2 * kw["tp"], "gpus": 2 * kw["gpus"]})
    r1, r2 = evaluate(one), evaluate(two)
    for name, x in r1.model_states_terms.items():
        assert close(r2.model_states_terms[name], x / 2), name
    assert close(r2.memory_bytes["model_states"], r1.memory_bytes["model_states"] / 2)
    assert close(r2.params_per_gpu, r1.params_per_gpu / 2)
    assert close(r2.memory_bytes["activations"], r1.memory_bytes["activations"] / 2)
    # without sequence parallelism full recompute keeps the whole layer input: unchanged by tp (compared on
    # equal, evenly balanced stages, where the first stage is the most loaded in both plans)
    if kw["recompute"] == "full" and kw["tp"] > 1 and kw["stage_balance"] == "even":
        a1 = evaluate(one.replace(sp=False)).memory_bytes["activations"]
        a2 = evaluate(two.replace(sp=False)).memory_bytes["activations"]
        assert close(a1, a2)


@_settings(400)
@given(plan_kwargs(), st.integers(1, 64))
def test_bubble_falls_as_micro_batches_grow(kw, extra):
    plan = Plan.create(**kw)
    more = plan.replace(micro_batches=plan.micro_batches + extra)
    b1, b2 = evaluate(plan).bubble, evaluate(more).bubble
    if plan.pp == 1:
        assert b1 == b2 == 0
    else:
        assert 0 < b2 < b1


@_settings(300)
@given(plan_kwargs(accounting=None))
def test_per_micro_batch_sync_grows_with_the_micro_batches(kw):
    """Doubling m doubles exactly the collectives an engine runs every micro-batch (FSDP2's, DeepSpeed ZeRO-2/3's,
    Megatron-FSDP's) and leaves the once-per-step ones (the lab's, Megatron's distributed optimizer's) alone."""
    plan = Plan.create(
        **{
            **kw,
            "virtual_stages": 1,
            "layers_per_stage": None,
            "pp": 1,
            "gpus": kw["gpus"] // kw["pp"],
            "gpus_per_node": 1,
        }
    )
    double = plan.replace(micro_batches=2 * plan.micro_batches)
    schedule = plan.accounting.sync_schedule(plan.zero, 1)
    n, p = (
        plan.dp,
        plan.stages[0].dense_params / plan.tp
        + (0 if (plan.ep > 1 or plan.etp != plan.tp) else plan.stages[0].expert_params / (plan.etp * plan.ep)),
    )
    per_mb = sum(c.bytes(n, p / plan.cp) for c in schedule if c.per_micro_batch)
    r1, r2 = evaluate(plan), evaluate(double)
    assert close(r2.grad_sync_bytes["dp"] - r1.grad_sync_bytes["dp"], per_mb * plan.micro_batches, 1e-9)


# ---------------------------------------------------------------- the mesh against brute force
class BruteMesh:
    """Rank ↔ coordinates by enumerating the grid, outermost axis first (itertools.product)."""

    def __init__(self, sizes: dict, order: str, gpn: int, ep: int):
        inner_to_outer = [a for a in order.split("-") if a != "ep"]
        outer_to_inner = inner_to_outer[::-1]
        self.coords = [
            dict(zip(outer_to_inner, combo)) for combo in itertools.product(*(range(sizes[a]) for a in outer_to_inner))
        ]
        self.rank_of = {tuple(c[a] for a in AXES): r for r, c in enumerate(self.coords)}
        self.sizes, self.gpn, self.ep = sizes, gpn, ep

    def group(self, rank: int, axis: str) -> tuple[int, ...]:
        c = self.coords[rank]
        if axis == "ep":
            members = [q for q, d in enumerate(self.coords) if d["tp"] == c["tp"] and d["pp"] == c["pp"]]
            k = members.index(rank) // self.ep
            return tuple(members[k * self.ep : (k + 1) * self.ep])
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
