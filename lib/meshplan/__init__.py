"""meshplan: the formula library of the course "Parallelism for LLM training".

Pure functions in base units (bytes, FLOP, seconds) over frozen dataclasses. Where each idea lives:

* one module per parallel dimension (``dp``, ``zero``, ``tp``, ``pp``, ``cp``, ``ep``) holds its formulas;
  ``collectives`` the ring costs; ``activations`` the lab's activation ledger; ``compute`` FLOP and time;
* the plan's parts: ``model`` (shapes and exact parameter counts), ``dims`` (the mesh shape), ``mesh`` (ranks,
  groups, links), ``hardware`` (the machine), ``accounting`` (the bookkeeping convention), ``stages`` (pipeline
  stages); ``plan`` combines them into a ``Report``; ``reporting`` turns a report into text;
* ``steptime`` the step-time model, ``search`` the plan search, ``export`` Megatron-LM and torchtitan settings,
  ``schedule`` the pipeline-schedule simulator, ``realrun`` the real PyTorch runs;
* ``derive`` the sympy derivations, ``widgets``, ``grid`` and ``plotting`` what the book shows, ``cli`` the
  command line.
"""

from . import activations, collectives, compute, cp, dp, ep, mesh, pp, tp, units, zero
from .accounting import LAB, Accounting, get_accounting
from .dims import ParallelDims
from .hardware import Hardware, available_hardware, load_hardware
from .mesh import Mesh
from .model import ModelSpec, ParamCount, available_models, load_model, model_from_config
from .plan import Plan, Report, Workload, evaluate
from .zero import DEFAULT_BPP, FSDP2_BPP, MEGATRON_BPP, BytesPerParam

__all__ = [
    "DEFAULT_BPP",
    "FSDP2_BPP",
    "LAB",
    "MEGATRON_BPP",
    "Accounting",
    "BytesPerParam",
    "Hardware",
    "Mesh",
    "ModelSpec",
    "ParallelDims",
    "ParamCount",
    "Plan",
    "Report",
    "Workload",
    "activations",
    "available_hardware",
    "available_models",
    "collectives",
    "compute",
    "cp",
    "dp",
    "ep",
    "evaluate",
    "get_accounting",
    "load_hardware",
    "load_model",
    "mesh",
    "model_from_config",
    "pp",
    "tp",
    "units",
    "zero",
]
__version__ = "0.2.0"
