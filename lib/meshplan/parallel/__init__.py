"""The formulas of each parallel dimension, as functions of sizes (imports only ``core`` and ``spec``):

* ``dp`` data parallel, ``zero`` ZeRO/FSDP model states and synchronisation, ``tp`` tensor (and sequence)
  parallel, ``pp`` pipeline, ``cp`` context, ``ep`` expert parallel;
* ``activations`` the lab page's activation ledger, ``engine_activations`` what the engines' autograd saves;
* ``compute`` FLOP per token and per layer; ``buckets`` DDP's and FSDP's gradient buckets.

The step-time analyses that take a whole ``Report`` live in ``meshplan.steptime``, above the plan.
"""
