"""meshplan: the formula library of the course "Parallelism for LLM training".

Pure functions in base units (bytes, FLOP, seconds) over frozen dataclasses. One module per parallel
dimension (``dp``, ``zero``, ``tp``, ``pp``, ``cp``, ``ep``), one module that knows ring costs
(``collectives``), the device ``mesh``, and ``plan`` which combines them. ``derive`` holds the sympy
derivations, ``widgets`` the predict-then-check exercises, ``cli`` the command line.
"""

from . import activations, collectives, compute, cp, dp, ep, mesh, pp, tp, units, zero
from .hardware import Hardware, load_hardware
from .mesh import Mesh
from .model import ModelSpec, ParamCount, available_models, load_model, model_from_config
from .plan import Plan, Report, evaluate
from .zero import DEFAULT_BPP, FSDP2_BPP, MEGATRON_BPP, BytesPerParam

__all__ = [
    "activations", "collectives", "compute", "cp", "dp", "ep", "mesh", "pp", "tp", "units", "zero",
    "Hardware", "load_hardware", "Mesh", "ModelSpec", "ParamCount", "available_models", "load_model",
    "model_from_config", "Plan", "Report", "evaluate", "BytesPerParam", "DEFAULT_BPP", "FSDP2_BPP", "MEGATRON_BPP",
]
__version__ = "0.1.0"
