"""meshplan: the formula library of the course "Parallelism for LLM training".

Pure functions in base units (bytes, FLOP, seconds) over frozen dataclasses, in layers; each layer imports only
the layers below it (``make lint`` checks it with import-linter, ``.importlinter``):

* ``core``: ring costs, units, data files, validation;
* ``spec``: the plan's parts as data (models, hardware, mesh shape, mesh, stages, the ledgers' conventions);
* ``parallel``: the formulas of each dimension (``dp``, ``zero``, ``tp``, ``pp``, ``cp``, ``ep``), activations,
  compute;
* ``plan`` (a plan and its ``Report``) beside ``schedule`` (the pipeline-schedule simulator);
* ``steptime``: the step-time model, its chapter breakdowns and its calibration;
* ``search``, ``export``, ``realrun`` (the real PyTorch runs) and ``widgets`` (the book's exercises);
* ``course``: what the book shows (evolution map, lab page, published runs, figures, derivations);
* ``cli``: the command line.

This module re-exports the front door: ``Plan``, ``evaluate``, the loaders, the parts' types and the errors a bad
input raises (``MeshplanError``, a ``ValueError``, and its kinds).
"""

from meshplan.core.validation import ConfigError, LedgerError, MeshplanError, PlanError
from meshplan.plan import Plan, Report, Workload, evaluate
from meshplan.spec.accounting import (
    DEFAULT_BPP,
    FSDP2_BPP,
    LAB,
    MEGATRON_BPP,
    Accounting,
    BytesPerParam,
    get_accounting,
)
from meshplan.spec.dims import ParallelDims
from meshplan.spec.hardware import Hardware, available_hardware, load_hardware
from meshplan.spec.mesh import Mesh
from meshplan.spec.model import ModelSpec, ParamCount, available_models, load_model, model_from_config

__all__ = [
    "DEFAULT_BPP",
    "FSDP2_BPP",
    "LAB",
    "MEGATRON_BPP",
    "Accounting",
    "BytesPerParam",
    "ConfigError",
    "Hardware",
    "LedgerError",
    "Mesh",
    "MeshplanError",
    "ModelSpec",
    "ParallelDims",
    "ParamCount",
    "Plan",
    "PlanError",
    "Report",
    "Workload",
    "available_hardware",
    "available_models",
    "evaluate",
    "get_accounting",
    "load_hardware",
    "load_model",
    "model_from_config",
]
__version__ = "0.2.0"
