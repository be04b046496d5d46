"""A parallel plan and its report: memory per GPU, bytes per dimension with link and time, bubble.

``Plan`` validates itself on construction (ValueError naming the factor); ``evaluate(plan)`` returns a
``Report``. Conventions are those of the lab page and of the modules this calls:

* model states: ``zero`` (16 B/param by default), parameters split evenly over TP × PP; ZeRO shards over
  the data-parallel ranks, which include the CP ranks (Megatron's dp-cp group, torchtitan's dp_shard × cp);
  routed experts are split over expert-TP × EP (expert-TP = TP unless ``expert_tp`` says otherwise) and
  sharded over the tp·cp·dp/(expert_tp·ep) ranks that hold the same expert shard. ``stage_balance="max"`` reports the
  most-loaded pipeline stage instead (stage 0 holds the embedding and vision tower, the last stage the
  output head, final norm and MTP module).
* activations: ``activations`` (Korthikanti 2022 Table 2 × the first stage's in-flight layers ÷ c).
* bytes per GPU per step, by dimension: ``dp`` (bf16 gradients on a ring, ZeRO-3: 3Ψ), ``tp``,
  ``pp``, ``cp`` (K/V of full-attention layers), ``ep`` (dispatch + combine all-to-all of the GPU's own
  tokens, s·b/c, ÷ t with sequence parallelism: each TP rank then holds only its sequence shard). The gradient
  sync over the dp·cp ranks is split as a two-level ring: the CP part (2(c−1)/c × G) is reported under
  ``cp`` and the DP part (2(d−1)/d × G/c) under ``dp``; with c = 1 this is the plain ring over d.
  Routed-expert gradients sync over those tp·cp·dp/(expert_tp·ep) ranks and are reported under ``dp``
  (under ``cp`` if d = 1). A dimension of size 1 sends 0 bytes and has link ``None``.
* time per dimension = bytes ÷ the bandwidth of its link (NVLink or InfiniBand); overlap and latency
  ignored.
* bubble = (p−1)/(m·v) of the ideal compute time.
* uneven pipeline stages: by default pp (× v) must divide the layers. Real plans do not always: Llama 3
  405B has 126 layers on PP 16 ("we reduce one Transformer layer each from the first and the last
  stages", Llama 3 §3.3.2) and DeepSeek-V3 61 layers on PP 16. ``layers_per_stage`` names the layers of
  every pipeline rank explicitly (``spread_layers`` builds the ends-lighter split); memory and bytes are
  then those of the most-loaded stage: its parameters (by bytes per GPU) and, for activations, the stage
  with the most layers × in-flight micro-batches under 1F1B (stage k holds min(m, p−k) micro-batches).

    >>> r = evaluate(Plan.create("qwen3.8-27b", gpus=8, dp=8, zero=3, recompute="full"))
    >>> round(r.memory_bytes["total"] / 1e9, 1), r.fits, round(r.comm_bytes_per_step["dp"] / 1e9, 1)
    (58.2, True, 145.9)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Mapping

from . import activations as act
from .collectives import reduce_scatter_bytes, transfer_time_s
from .cp import cp_kv_bytes_per_step
from .ep import ep_bytes_per_step
from .hardware import Hardware, load_hardware
from .mesh import DEFAULT_ORDER, Mesh, parse_order
from .model import ModelSpec, load_model
from .pp import bubble_fraction, bubble_share_of_time, pp_bytes_per_step
from .tp import tp_bytes_per_step
from .zero import DEFAULT_BPP, BytesPerParam, model_states_terms, zero_comm_factor
from .dp import GRAD_BYTES_PER_PARAM

DIMS = ("dp", "tp", "pp", "cp", "ep")
MESH_KEYS = ("tp", "cp", "ep", "dp", "pp")


def _pos_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} must be a positive integer")
    if value < 1:
        raise ValueError(f"{name}={value} must be a positive integer")


def spread_layers(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline rank when pp does not divide them: every rank gets ⌈L/p⌉ layers, and the
    ⌈L/p⌉·p − L layers too many are taken one each from the ends inwards (first, last, second,
    second-to-last, ...), the ranks that also hold the embedding and the output head. Llama 3 §3.3.2 does
    exactly this for 126 layers on PP 16 (one layer fewer on the first and the last stage).

        >>> spread_layers(126, 16)
        (7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7)
        >>> spread_layers(61, 16)[:3], spread_layers(61, 16)[-2:], sum(spread_layers(61, 16))
        ((3, 3, 4), (4, 3), 61)
    """
    _pos_int("num_layers", num_layers)
    _pos_int("pp", pp)
    if pp > num_layers:
        raise ValueError(f"pp={pp} is more than {num_layers} layers (every stage needs at least one)")
    per = -(-num_layers // pp)
    out = [per] * pp
    ends = [i for k in range((pp + 1) // 2) for i in dict.fromkeys((k, pp - 1 - k))]
    for i in ends[:per * pp - num_layers]:
        out[i] -= 1
    return tuple(out)


def stage_inflight_layers(layers_per_stage, micro_batches: int, virtual_stages: int = 1) -> float:
    """Layers' worth of activations on the most-loaded pipeline rank under 1F1B with uneven stages:
    max over ranks k of layers_k × min(m, p−k), × (1 + (p−1)/(p·v)) when interleaved (v > 1).
    With equal stages this is Korthikanti's Eq. 5 (``activations.pipeline_inflight_layers``).

        >>> stage_inflight_layers(spread_layers(126, 16), 16)   # rank 1: 8 layers × 15 micro-batches
        120.0
    """
    p = len(layers_per_stage)
    worst = max(n * min(micro_batches, p - k) for k, n in enumerate(layers_per_stage))
    factor = 1 + (p - 1) / (p * virtual_stages) if virtual_stages > 1 else 1
    return float(worst * factor)


@dataclass(frozen=True)
class Plan:
    """One parallel configuration. All sizes are counts; memory in bytes (GB = 10⁹ B).

    Attributes:
        model: the ``ModelSpec`` (``Plan.create`` accepts a name or a path).
        gpus: world size; must equal tp × cp × pp × dp.
        tp, cp, ep, pp, dp: parallel sizes (ep folds inside dp × cp).
        zero: ZeRO stage 0–3 over the data-parallel ranks.
        recompute: ``"none"``, ``"selective"`` or ``"full"``.
        seq: sequence length s in tokens; micro_batch_size: b; micro_batches: m per step;
        virtual_stages: v (interleaved schedule when > 1).
        sp: sequence parallel; ``None`` means on whenever tp > 1.
        order: mesh axis order, inner to outer.
        gpus_per_node, gpu_memory_bytes: the machine.
        bytes_per_param: named terms (16 B default).
        stage_balance: ``"even"`` (the lab page) or ``"max"`` (the most-loaded pipeline stage).
        layers_per_stage: ``None`` (strict: pp × v must divide the layers) or the layers of each pipeline
            rank, first to last (e.g. ``spread_layers(126, 16)``); they must add up to the layers and each
            rank needs at least v of them. With ``stage_balance="even"`` the parameters outside the layers
            (embedding, head, vision, MTP) are spread evenly; with ``"max"`` they sit on the end stages.
        expert_tp: expert tensor-parallel size (Megatron's ``--expert-tensor-parallel-size``); ``None`` means
            tp. With expert_tp < tp the expert layers regroup the tp × cp × dp ranks of a stage as
            expert_tp × ep × expert-dp (MoE parallel folding), so ep × expert_tp must divide tp × cp × dp.
        kv_replication: allow tp > KV heads when KV heads divide tp (each KV head is then replicated on
            tp/kv GPUs, as inference and training engines do); ``False`` demands tp | KV heads.
        hardware: link bandwidths and effective FLOP/s.
    """

    model: ModelSpec
    gpus: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    zero: int = 0
    recompute: str = "none"
    seq: int = 4096
    micro_batch_size: int = 1
    micro_batches: int = 8
    virtual_stages: int = 1
    sp: bool | None = None
    order: str = DEFAULT_ORDER
    gpus_per_node: int = 8
    gpu_memory_bytes: float = 80e9
    bytes_per_param: BytesPerParam = DEFAULT_BPP
    stage_balance: str = "even"
    kv_replication: bool = True
    expert_tp: int | None = None
    layers_per_stage: tuple[int, ...] | None = None
    hardware: Hardware = field(default_factory=load_hardware, compare=False, repr=False)

    @classmethod
    def create(cls, model, gpus: int, dp: int | None = None, **kw) -> "Plan":
        """Build a plan from a model name/path/spec; ``dp`` defaults to gpus ÷ (tp × cp × pp)."""
        spec = load_model(model)
        _pos_int("gpus", gpus)
        if dp is None:
            for k in ("tp", "cp", "pp"):
                _pos_int(k, kw.get(k, 1))
            inner = kw.get("tp", 1) * kw.get("cp", 1) * kw.get("pp", 1)
            if gpus % inner:
                raise ValueError(f"tp×cp×pp = {kw.get('tp', 1)}×{kw.get('cp', 1)}×{kw.get('pp', 1)} = {inner} "
                                 f"does not divide gpus={gpus}")
            dp = gpus // inner
        return cls(model=spec, gpus=gpus, dp=dp, **kw)

    def __post_init__(self):
        m = self.model
        if not isinstance(m, ModelSpec):
            raise ValueError(f"model={m!r} must be a ModelSpec (use Plan.create with a name or path)")
        for name in ("gpus", "tp", "cp", "ep", "pp", "dp", "seq", "micro_batch_size", "micro_batches",
                     "virtual_stages", "gpus_per_node"):
            _pos_int(name, getattr(self, name))
        if self.zero not in (0, 1, 2, 3) or isinstance(self.zero, bool):
            raise ValueError(f"zero={self.zero!r} must be 0, 1, 2 or 3")
        if self.recompute not in act.RECOMPUTE_MODES:
            raise ValueError(f"recompute={self.recompute!r} must be one of {', '.join(act.RECOMPUTE_MODES)}")
        if self.stage_balance not in ("even", "max"):
            raise ValueError(f"stage_balance={self.stage_balance!r} must be 'even' or 'max'")
        if isinstance(self.gpu_memory_bytes, bool) or not isinstance(self.gpu_memory_bytes, (int, float)) \
                or not math.isfinite(self.gpu_memory_bytes) or not self.gpu_memory_bytes > 0:
            raise ValueError(f"gpu_memory_bytes={self.gpu_memory_bytes!r} must be positive")
        parse_order(self.order)
        prod = self.tp * self.cp * self.pp * self.dp
        if prod != self.gpus:
            raise ValueError(f"gpus={self.gpus} is not tp×cp×pp×dp = {self.tp}×{self.cp}×{self.pp}×{self.dp} = {prod}")
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise ValueError(f"gpus_per_node={self.gpus_per_node} does not divide gpus={self.gpus}")
        t = self.tp
        if m.num_attention_heads % t:
            raise ValueError(f"tp={t} does not divide {m.num_attention_heads} attention heads")
        kv = m.num_key_value_heads
        if kv % t and not (self.kv_replication and t % kv == 0):
            if self.kv_replication:
                raise ValueError(f"tp={t} does not divide {kv} KV heads (and {kv} KV heads do not divide tp={t} "
                                 "for replication)")
            raise ValueError(f"tp={t} does not divide {kv} KV heads")
        for heads, what in ((m.linear_num_key_heads, "linear-attention key heads"),
                            (m.linear_num_value_heads, "linear-attention value heads")):
            if heads and heads % t:
                raise ValueError(f"tp={t} does not divide {heads} {what}")
        if self.layers_per_stage is not None:
            self._check_layers_per_stage()
        elif m.num_layers % (self.pp * self.virtual_stages):
            if self.virtual_stages > 1:
                raise ValueError(f"pp×virtual_stages = {self.pp}×{self.virtual_stages} does not divide "
                                 f"{m.num_layers} layers")
            raise ValueError(f"pp={self.pp} does not divide {m.num_layers} layers")
        if self.virtual_stages > 1:
            if self.pp == 1:
                raise ValueError(f"virtual_stages={self.virtual_stages} needs pp > 1")
            if self.micro_batches < self.pp:
                raise ValueError(f"micro_batches={self.micro_batches} is fewer than pp={self.pp} stages, "
                                 "which the interleaved schedule needs")
        if self.seq % self.cp:
            raise ValueError(f"cp={self.cp} does not divide seq={self.seq}")
        if self.ep > 1:
            if not m.is_moe:
                raise ValueError(f"ep={self.ep} but {m.name} has no experts")
            if m.num_experts % self.ep:
                raise ValueError(f"ep={self.ep} does not divide {m.num_experts} experts")
        if self.expert_tp is not None:
            _pos_int("expert_tp", self.expert_tp)
            if self.tp % self.expert_tp:
                raise ValueError(f"expert_tp={self.expert_tp} does not divide tp={self.tp}")
        if self.ep > 1:
            if self.etp == self.tp:
                if (self.dp * self.cp) % self.ep:
                    raise ValueError(f"ep={self.ep} does not divide dp×cp = {self.dp}×{self.cp} = {self.dp * self.cp}")
            elif (self.tp * self.cp * self.dp) % (self.ep * self.etp):
                raise ValueError(f"ep×expert_tp = {self.ep}×{self.etp} = {self.ep * self.etp} does not divide "
                                 f"tp×cp×dp = {self.tp}×{self.cp}×{self.dp} = {self.tp * self.cp * self.dp}")

    def _check_layers_per_stage(self) -> None:
        lps = self.layers_per_stage
        if isinstance(lps, (str, bytes)) or not hasattr(lps, "__iter__"):
            raise ValueError(f"layers_per_stage={lps!r} must be a sequence of layer counts, one per pipeline rank")
        lps = tuple(lps)
        object.__setattr__(self, "layers_per_stage", lps)
        for n in lps:
            _pos_int("layers_per_stage entry", n)
        if len(lps) != self.pp:
            raise ValueError(f"layers_per_stage has {len(lps)} entries but pp={self.pp}")
        if sum(lps) != self.model.num_layers:
            raise ValueError(f"layers_per_stage adds up to {sum(lps)}, not {self.model.num_layers} layers")
        if min(lps) < self.virtual_stages:
            raise ValueError(f"virtual_stages={self.virtual_stages} needs at least {self.virtual_stages} layers on "
                             f"every pipeline rank (layers_per_stage has {min(lps)})")

    @property
    def stage_layers(self) -> tuple[int, ...]:
        """Layers of each pipeline rank (equal unless ``layers_per_stage`` says otherwise)."""
        if self.layers_per_stage is not None:
            return self.layers_per_stage
        return (self.model.num_layers // self.pp,) * self.pp

    @cached_property
    def mesh(self) -> Mesh:
        return Mesh({"tp": self.tp, "cp": self.cp, "pp": self.pp, "dp": self.dp}, self.order,
                    self.gpus_per_node, self.ep, self.etp)

    @property
    def etp(self) -> int:
        """The expert tensor-parallel size (tp unless ``expert_tp`` says otherwise)."""
        return self.tp if self.expert_tp is None else self.expert_tp

    @property
    def expert_dp(self) -> int:
        """Ranks that hold the same expert shard and sync its gradients: tp·cp·dp ÷ (expert_tp·ep)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @property
    def sequence_parallel(self) -> bool:
        return self.tp > 1 if self.sp is None else bool(self.sp)


@dataclass(frozen=True)
class Report:
    """What a plan costs per GPU. Bytes are per GPU; communication is bytes sent per step.

    ``grad_sync_bytes`` is the part of ``comm_bytes_per_step["dp"]`` and ``["cp"]`` that synchronises
    gradients (and, with ZeRO-3, gathers weights): the traffic that can overlap the backward pass, unlike
    the K/V exchange of context parallelism.
    """

    plan: Plan
    params_per_gpu: float
    model_states_terms: Mapping[str, float]
    memory_bytes: Mapping[str, float]
    fits: bool
    comm_bytes_per_step: Mapping[str, float]
    link: Mapping[str, str | None]
    comm_time_s: Mapping[str, float]
    bubble: float
    bubble_share: float
    notes: tuple[str, ...] = ()
    grad_sync_bytes: Mapping[str, float] = field(default_factory=dict)

    @property
    def heaviest_dim(self) -> str | None:
        """The dimension that sends the most bytes per step (None if nothing is sent)."""
        dim = max(DIMS, key=lambda d: self.comm_bytes_per_step[d])
        return dim if self.comm_bytes_per_step[dim] > 0 else None

    def to_dict(self) -> dict:
        """The ``plan --json`` contract (extra keys after the contract's)."""
        p = self.plan
        return {
            "model": p.model.name,
            "params": p.model.params.total,
            "gpus": p.gpus,
            "mesh": {k: getattr(p, k) for k in MESH_KEYS},
            "memory_bytes": dict(self.memory_bytes),
            "fits": self.fits,
            "comm_bytes_per_step": dict(self.comm_bytes_per_step),
            "link": dict(self.link),
            "bubble": self.bubble,
            "bubble_share_of_time": self.bubble_share,
            "comm_time_s": dict(self.comm_time_s),
            "model_states_terms": dict(self.model_states_terms),
            "settings": {"zero": p.zero, "recompute": p.recompute, "seq": p.seq,
                         "micro_batch_size": p.micro_batch_size, "micro_batches": p.micro_batches,
                         "virtual_stages": p.virtual_stages, "sequence_parallel": p.sequence_parallel,
                         "order": p.order, "gpus_per_node": p.gpus_per_node,
                         "gpu_memory_bytes": p.gpu_memory_bytes, "stage_balance": p.stage_balance,
                         "layers_per_stage": list(p.layers_per_stage) if p.layers_per_stage else None,
                         "expert_tp": p.etp},
            "notes": list(self.notes),
        }


def _stage_params(plan: Plan) -> tuple[float, float]:
    """(dense, routed-expert) parameters of one pipeline stage's model replica, before TP/EP splits."""
    m = plan.model
    if plan.pp > 1 and (plan.layers_per_stage is not None or plan.stage_balance == "max"):
        return _uneven_stage_params(plan)
    experts = m.routed_expert_params
    return (m.params.total - experts) / plan.pp, experts / plan.pp


def _uneven_stage_params(plan: Plan) -> tuple[float, float]:
    """(dense, routed-expert) parameters of the stage whose share per GPU (dense/t + experts/(expert_tp·e))
    is largest, for explicit ``layers_per_stage`` (or equal stages with ``stage_balance="max"``).

    With ``stage_balance="max"`` the first stage holds the embedding (and vision tower), the last the head,
    final norm and MTP module, whose routed experts (one MoE layer's worth for DeepSeek-V3) count as
    experts; with ``"even"`` everything outside the layers is spread evenly over the stages."""
    m = plan.model
    comps = m.params.components
    lexp = m.layer_expert_params or (0,) * m.num_layers
    final_norm = sum(n * per for name, n, per in m.params.groups if name == "final_norm")
    first = comps["embedding"] + comps["vision"]
    mtp = comps["mtp"] + m.params.extra.get("mtp", 0)
    # a MoE model's MTP module holds one MoE layer: its routed experts are split over EP like the others
    mtp_exp = max(lexp) if (mtp and m.is_moe) else 0
    last = comps["head"] + final_norm + mtp - mtp_exp
    outside_even = (m.params.total - sum(m.layer_params)) / plan.pp
    best, best_load, start = (0.0, 0.0), -1.0, 0
    stages = plan.layers_per_stage or (m.num_layers // plan.pp,) * plan.pp
    for k, n in enumerate(stages):
        layers = range(start, start + n)
        start += n
        dense = float(sum(m.layer_params[i] - lexp[i] for i in layers))
        exp = float(sum(lexp[i] for i in layers))
        if plan.stage_balance == "even":
            dense += outside_even
        else:
            dense += (first if k == 0 else 0) + (last if k == plan.pp - 1 else 0)
            exp += mtp_exp if k == plan.pp - 1 else 0
        load = dense + exp * plan.tp / (plan.etp * plan.ep)
        if load > best_load:
            best, best_load = (dense, exp), load
    return best


def _busiest_stage_layers(plan: Plan) -> tuple[int, int]:
    """(layers, MoE layers) of the pipeline rank with the most layers (the most MoE layers among ties)."""
    m = plan.model
    lexp = m.layer_expert_params or (0,) * m.num_layers
    best, start = (0, 0), 0
    for n in plan.stage_layers:
        moe = sum(1 for i in range(start, start + n) if lexp[i])
        start += n
        best = max(best, (n, moe))
    return best


@lru_cache(maxsize=4096)
def _links(sizes: tuple[int, int, int, int], order: str, gpus_per_node: int, ep: int, etp: int) -> tuple:
    """The link of every dimension for a mesh shape (cached: large EP meshes walk their groups)."""
    mesh = Mesh(dict(zip(("tp", "cp", "pp", "dp"), sizes)), order, gpus_per_node, ep, etp)
    return tuple((dim, mesh.link(dim)) for dim in DIMS)


def evaluate(plan: Plan) -> Report:
    """Evaluate ``plan``: memory per GPU, bytes per dimension per step with link and time, bubble."""
    m, hw = plan.model, plan.hardware
    t, c, p, d, e = plan.tp, plan.cp, plan.pp, plan.dp, plan.ep
    v, mb = plan.virtual_stages, plan.micro_batches
    s, b, h = plan.seq, plan.micro_batch_size, m.hidden_size
    notes = []

    # ---- model states
    dense, experts = _stage_params(plan)
    dense_gpu = dense / t
    expert_gpu = experts / (plan.etp * e)
    dc = d * c
    terms = model_states_terms(dense_gpu, plan.zero, dc, plan.bytes_per_param)
    if expert_gpu:
        for k, x in model_states_terms(expert_gpu, plan.zero, plan.expert_dp, plan.bytes_per_param).items():
            terms[k] += x
    states = sum(terms.values())

    # ---- activations (first pipeline stage, per CP rank)
    if plan.layers_per_stage is not None and p > 1:
        per_layer = act.activation_bytes_per_layer(s, b, h, m.num_attention_heads, t, plan.recompute,
                                                   plan.sequence_parallel)
        activ = per_layer * stage_inflight_layers(plan.layers_per_stage, mb, v) / c
    else:
        activ = act.activation_bytes(s, b, h, m.num_attention_heads, m.num_layers, t, plan.recompute,
                                     plan.sequence_parallel, p, mb, v, c)
    total = states + activ

    # ---- bytes per dimension
    k = zero_comm_factor(plan.zero)
    g_dense = dense_gpu * GRAD_BYTES_PER_PARAM
    g_exp = expert_gpu * GRAD_BYTES_PER_PARAM
    comm = dict.fromkeys(DIMS, 0.0)
    # two-level ring over the dp x cp ranks: k x (c-1)/c x G inside CP, k x (d-1)/d x G/c across DP
    comm["cp"] += k * reduce_scatter_bytes(c, g_dense)
    comm["dp"] += k * reduce_scatter_bytes(d, g_dense / c)
    if g_exp:
        comm["dp" if d > 1 else "cp"] += k * reduce_scatter_bytes(plan.expert_dp, g_exp)
    grad_sync = {"dp": comm["dp"], "cp": comm["cp"]}  # the gradient (ZeRO) part of dp and cp, before K/V
    if plan.layers_per_stage is not None:
        layers_here, moe_busiest = _busiest_stage_layers(plan)
    else:
        layers_here, moe_busiest = m.num_layers // p, None
    if t > 1:
        comm["tp"] = tp_bytes_per_step(s // c, b, h, layers_here, t, mb)
    comm["pp"] = pp_bytes_per_step(s // c, b, h, p, mb, v)
    if c > 1:
        kv_heads_gpu = max(m.num_key_value_heads // t, 1)
        kv_width_gpu = m.kv_width * kv_heads_gpu // m.num_key_value_heads
        full_here = m.num_full_attention_layers * layers_here // m.num_layers
        comm["cp"] += cp_kv_bytes_per_step(s, b, kv_width_gpu, c, full_here, mb)
    if e > 1:
        moe_here = moe_busiest if moe_busiest is not None else m.num_moe_layers * layers_here // m.num_layers
        # with sequence parallelism each TP rank holds (and dispatches) only its s/(c·t) tokens; Megatron
        # demands SP whenever MoE runs with TP, and gathers the tokens over TP after the all-to-all
        ep_tokens = s // c * b / t if plan.sequence_parallel else s // c * b
        comm["ep"] = ep_bytes_per_step(ep_tokens, m.experts_per_token, h, e, moe_here, mb)

    link = dict(_links((t, c, p, d), plan.order, plan.gpus_per_node, e, plan.etp))
    bw = {"nvlink": hw.nvlink_bytes_per_s, "infiniband": hw.infiniband_bytes_per_s}
    times = {dim: (transfer_time_s(comm[dim], bw[link[dim]]) if link[dim] else 0.0) for dim in DIMS}

    if t > m.num_key_value_heads:
        notes.append(f"tp={t} > {m.num_key_value_heads} KV heads: each KV head is replicated on "
                     f"{t // m.num_key_value_heads} GPUs (the extra k/v weights are not counted)")
    if plan.recompute == "full" and t > 1:
        notes.append("full recompute re-runs the forward's 2 TP collectives per layer; not counted (lab convention)")

    if not all(math.isfinite(x) for x in (total, *comm.values())):
        raise ValueError(f"seq={s}, hidden_size={h}: memory or bytes per step overflow a float; the inputs are "
                         "too large")
    return Report(
        plan=plan, params_per_gpu=dense_gpu + expert_gpu, model_states_terms=terms,
        memory_bytes={"model_states": states, "activations": activ, "total": total},
        fits=total <= plan.gpu_memory_bytes, comm_bytes_per_step=comm, link=link, comm_time_s=times,
        bubble=bubble_fraction(p, mb, v) if p > 1 else 0.0,
        bubble_share=bubble_share_of_time(p, mb, v) if p > 1 else 0.0, notes=tuple(notes),
        grad_sync_bytes=grad_sync,
    )
