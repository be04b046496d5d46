"""What two widely used memory estimators compute, so the course can say why they differ from 16Ψ/N.

Source: ``shared/reference/estimators.md``, which reads them from their code.

**DeepSpeed** (deepspeedai/DeepSpeed, ``deepspeed/runtime/zero/stage_1_and_2.py`` and ``stage3.py``):
``estimate_zero2_model_states_mem_needs`` and ``estimate_zero3_model_states_mem_needs``. Model states only,
per GPU and per node's CPU, in bytes (ints). With N = nodes × GPUs per node, no offload:

* ZeRO-2: GPU = 2Ψ + int(18Ψ/N): the 16-bit parameters stay whole; the 18 = 2 (16-bit grads) + 4 (fp32
  grads) + 4 (fp32 params) + 8 (Adam) are partitioned. An older release used 4Ψ + int(16Ψ/N).
* ZeRO-3: GPU = 4·LL + int(18Ψ/N), where LL is the largest layer's parameter count (4·LL: room to gather
  one module in 16 bits plus its 16-bit gradient).

Both are larger than the ZeRO paper's accounting (``zero.model_states_bytes``): 18 B instead of 16 B per
parameter, un-partitioned 16-bit parameters in ZeRO-2, a gather buffer in ZeRO-3.

**Megatron-LM** (``megatron/training/theoretical_memory_usage.py``, ``compute_weight_and_optimizer_memory``):
weights + optimizer bytes on the most-loaded GPU: its own parameter count (no biases, no q/k norms, no
attention output gate, no router), the most-loaded shard = (transformer block ÷ p + MTP block +
embedding) ÷ t (+ the output layer ÷ t when untied and p = 1), × 18 B (2 + 4 fp32 grads + 12), or
× (6 + 12/DP) with the distributed optimizer. Megatron prints MiB (÷ 2²⁰).

    >>> zero2_model_states(27_781_427_952, num_gpus_per_node=8, cpu_offload=False)[1]
    118071068796
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.core.units import MiB

ADDITIONAL_BUFFER_FACTOR = 1.5  # DeepSpeed's default additional_buffer_factor (CPU side)


def _check_counts(**kw) -> None:
    for name, value in kw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")


def zero2_model_states(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = ADDITIONAL_BUFFER_FACTOR,
    legacy: bool = False,
) -> tuple[int, int]:
    """DeepSpeed's ``estimate_zero2_model_states_mem_needs`` → (cpu_bytes, gpu_bytes) per node / per GPU.

    No offload: GPU = 2Ψ + int(18Ψ/N), CPU = Ψ·4·gpus_per_node·1.5. Offload: GPU = 2Ψ,
    CPU = Ψ·max(4N, 16)·1.5. ``legacy=True``: the older release's GPU = 4Ψ + int(16Ψ/N) without offload.

        >>> zero2_model_states(27_781_427_952, 8, cpu_offload=False, legacy=True)[1]
        166688567712
    """
    _check_counts(total_params=total_params, num_gpus_per_node=num_gpus_per_node, num_nodes=num_nodes)
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_mem = (
            4 * total_params + int(16 * total_params / total_gpus)
            if legacy
            else 2 * total_params + int(18 * total_params / total_gpus)
        )
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def zero3_model_states(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = ADDITIONAL_BUFFER_FACTOR,
) -> tuple[int, int, int]:
    """DeepSpeed's ``estimate_zero3_model_states_mem_needs`` → (cpu_bytes, gpu_bytes, largest_layer_bytes).

    largest_layer_bytes = 4·LL. No offload: GPU = 4·LL + int(18Ψ/N), CPU = LL·4·gpn·1.5 (zero_init) or
    Ψ·4·gpn·1.5. Optimizer offload: GPU = 4·LL + int(2Ψ/N), CPU = Ψ·16/nodes·1.5 (zero_init) or
    Ψ·max(4·gpn, 16/nodes)·1.5. Optimizer and parameter offload: GPU = 4·LL, CPU = Ψ·18/nodes·1.5
    (zero_init) or Ψ·max(4·gpn, 18/nodes)·1.5.

        >>> zero3_model_states(27_781_427_952, 1_271_398_400, 8, cpu_offload=False)[1]
        67593806492
    """
    _check_counts(
        total_params=total_params,
        largest_layer_params=largest_layer_params,
        num_gpus_per_node=num_gpus_per_node,
        num_nodes=num_nodes,
    )
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            per = 18 * gpus_factor
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            per = 16 * gpus_factor
        cpu_mem = total_params * (per if zero_init else max(4 * num_gpus_per_node, per)) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        base = largest_layer_params if zero_init else total_params
        cpu_mem = base * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), largest_layer_memory


@dataclass(frozen=True)
class MegatronArgs:
    """The Megatron arguments ``compute_weight_and_optimizer_memory`` reads (names as in Megatron)."""

    hidden_size: int  # h
    num_layers: int  # L
    num_attention_heads: int  # a
    kv_channels: int  # d, the head dim
    ffn_hidden_size: int  # f
    padded_vocab_size: int  # V after padding to a multiple of 128 × t
    num_query_groups: int | None = None  # g (GQA); None: = a
    swiglu: bool = True
    normalization: str = "RMSNorm"  # "RMSNorm" (1 weight) or "LayerNorm" (weight + bias)
    untie_embeddings_and_output_weights: bool = True
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    data_parallel_size: int = 1
    use_distributed_optimizer: bool = False
    num_experts: int | None = None
    moe_ffn_hidden_size: int = 0
    moe_shared_expert_intermediate_size: int | None = None
    moe_layer_freq: int | tuple[int, ...] = 1
    mtp_num_layers: int | None = None
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_head_dim: int = 0
    qk_pos_emb_head_dim: int = 0
    v_head_dim: int = 0


def megatron_layer_params(args: MegatronArgs) -> tuple[float, float]:
    """(dense layer, MoE layer) parameters as Megatron counts them.

    Attention (GQA): 2h²·(1 + g/a)·(a·d/h); MLA: q term + kv_lora·(h + a·(qk + v) + norm) + h·qk_pos + a·v·h.
    Dense layer: 2h·(f·m + norm) + attention, m = 3/2 with SwiGLU; MoE layer: 2h·(f_moe·E·m + f_shared·m +
    norm) + attention (no router).

        >>> megatron_layer_params(MegatronArgs(8192, 80, 64, 128, 28672, 129024, num_query_groups=8))[0]
        855654400.0
    """
    h, a = args.hidden_size, args.num_attention_heads
    norm = 1 if args.normalization == "RMSNorm" else 2
    m = 3 / 2 if args.swiglu else 1
    attn: float
    if args.multi_latent_attention:
        if args.q_lora_rank is None:
            q_term = h * a * (args.qk_head_dim + args.qk_pos_emb_head_dim)
        else:
            q_term = args.q_lora_rank * (h + a * (args.qk_head_dim + args.qk_pos_emb_head_dim) + norm)
        attn = (
            q_term
            + args.kv_lora_rank * (h + a * (args.qk_head_dim + args.v_head_dim) + norm)
            + h * args.qk_pos_emb_head_dim
            + a * args.v_head_dim * h
        )
    else:
        g = a if args.num_query_groups is None else args.num_query_groups
        attn = 2 * h * h * ((1 + g / a) * (args.kv_channels * a / h))
    experts = 1 if args.num_experts is None else args.num_experts
    moe_ffn = args.moe_ffn_hidden_size if args.num_experts is not None else 0
    shared = args.moe_shared_expert_intermediate_size or 0
    dense = 2 * h * (args.ffn_hidden_size * m + norm) + attn
    moe = 2 * h * (moe_ffn * experts * m + shared * m + norm) + attn
    return dense, moe


def megatron_weight_and_optimizer_bytes(args: MegatronArgs) -> float:
    """Megatron's ``compute_weight_and_optimizer_memory``: bytes of weights + optimizer on the most-loaded GPU.

    (transformer block ÷ p + MTP block + embedding) ÷ t [+ embedding ÷ t if untied and p = 1] × (18, or
    6 + 12/DP with the distributed optimizer). Worked number (estimators.md §1.5): Llama-3.1-70B at t = 8,
    p = 8 holds 1,201,688,704 parameters, 21,630,396,672 B = 20,628.35 MiB.

        >>> args = MegatronArgs(8192, 80, 64, 128, 28672, 129024, num_query_groups=8,
        ...                     tensor_model_parallel_size=8, pipeline_model_parallel_size=8)
        >>> megatron_weight_and_optimizer_bytes(args)
        21630396672.0
    """
    _check_counts(
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        data_parallel_size=args.data_parallel_size,
        num_layers=args.num_layers,
    )
    if args.normalization not in ("RMSNorm", "LayerNorm"):
        raise ValueError(f"normalization={args.normalization!r} must be 'RMSNorm' or 'LayerNorm'")
    L = args.num_layers
    if args.num_experts is not None:
        if isinstance(args.moe_layer_freq, int):
            pattern = [1 if i % args.moe_layer_freq == 0 else 0 for i in range(L)]
        else:
            pattern = list(args.moe_layer_freq)
            if len(pattern) != L:
                raise ValueError(f"moe_layer_freq lists {len(pattern)} layers, not num_layers={L}")
    else:
        pattern = [0] * L
    n_moe = sum(pattern)
    n_dense = L - n_moe
    if args.mtp_num_layers is not None:
        mtp_moe = pattern[-1] * args.mtp_num_layers
        mtp_dense = (1 - pattern[-1]) * args.mtp_num_layers
    else:
        mtp_moe = mtp_dense = 0
    dense, moe = megatron_layer_params(args)
    norm = 1 if args.normalization == "RMSNorm" else 2
    embedding = args.hidden_size * args.padded_vocab_size
    block = dense * n_dense + moe * n_moe + norm * args.hidden_size
    mtp = dense * mtp_dense + moe * mtp_moe
    t, p = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    shard = (block / p + mtp + embedding) / t
    if args.untie_embeddings_and_output_weights and p == 1:
        shard += embedding / t
    per_param = 6 + 12 / args.data_parallel_size if args.use_distributed_optimizer else 18
    return shard * per_param


def megatron_mib(n_bytes: float) -> float:
    """Bytes in the unit Megatron prints as "MB": MiB (÷ 2²⁰)."""
    return n_bytes / MiB
