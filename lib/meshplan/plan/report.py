"""What a plan costs per GPU: the ``Report`` that ``evaluate`` returns, and the names of its traffic keys.

>>> TRAFFIC
('dp', 'tp', 'pp', 'cp', 'ep', 'edp')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from meshplan.core.collectives import Collective
from meshplan.parallel.peak import Headroom, Moment
from meshplan.plan.construct import Plan

__all__ = ["DIMS", "MESH_KEYS", "TRAFFIC", "Report", "StagePeak", "StepInputs"]

DIMS = ("dp", "tp", "pp", "cp", "ep")
TRAFFIC = (*DIMS, "edp")  # the report's traffic keys: the five dimensions and the expert-data-parallel sync
MESH_KEYS = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True)
class StagePeak:
    """One pipeline stage's step, moment by moment (``parallel.peak``): ``moments`` in step order, ``peak`` the
    largest."""

    index: int
    moments: tuple[Moment, ...]
    peak: Moment


@dataclass(frozen=True)
class StepInputs:
    """What the step-time model (``steptime.step_time``) reads of a plan's report: the traffic part of ``evaluate``
    (``evaluation.step_inputs``: bytes, links, times and collectives of the traffic stage, the bubble) and the model
    states of the reported stage. A ``Report`` carries the same fields with the same values; a search times the
    plans that fit from this alone and builds their reports when they are read."""

    plan: Plan
    model_states_terms: Mapping[str, float]
    comm_bytes_per_step: Mapping[str, float]
    link: Mapping[str, str | None]
    comm_time_s: Mapping[str, float]
    grad_sync_bytes: Mapping[str, float]
    collectives: Mapping[str, tuple[Collective, ...]]
    traffic_stage: int
    bubble: float
    bubble_share: float


@dataclass(frozen=True)
class Report:
    """What a plan costs per GPU. Bytes are per GPU; communication is bytes sent per step.

    ``stage`` is the pipeline rank whose memory is reported (the most loaded); ``traffic_stage`` the one whose
    bytes are (the one with the most layers). ``grad_sync_bytes`` is the part of ``comm_bytes_per_step`` that
    synchronises gradients (and, with ZeRO-3, gathers weights), by key: the traffic that can overlap the backward
    pass, unlike TP's, PP's, CP's K/V and EP's dispatch. ``collectives``: TP's, CP's and EP's collectives as data,
    per unit (TP: a decoder layer; CP: a full-attention layer; EP: a MoE layer) and micro-batch
    (``core.collectives.Collective``): ``comm_bytes_per_step`` sums their ledger entries over the traffic stage and
    the step-time model prices all of them, so that a change to a dimension's traffic changes its time too.
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
    stage: int = 0
    traffic_stage: int = 0
    collectives: Mapping[str, tuple[Collective, ...]] = field(default_factory=dict)
    by_stage: tuple[StagePeak, ...] = ()
    peak_stage: int = 0
    headroom: Headroom = field(default_factory=lambda: Headroom(0.0, 1.0, 0.0, 1.0))  # evaluate sets the plan's
    memory_floor: float = 0.0
    stage_totals: tuple[float, ...] = ()

    @property
    def heaviest_dim(self) -> str | None:
        """The dimension that sends the most bytes per step (None if nothing is sent)."""
        dim = max(TRAFFIC, key=lambda d: self.comm_bytes_per_step[d])
        return dim if self.comm_bytes_per_step[dim] > 0 else None
