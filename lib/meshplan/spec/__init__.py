"""What a plan is made of, as validated data (imports only ``core``):

* ``models`` and ``model``: model configurations, their layers and exact parameter counts;
* ``hardware``: the machine presets (memory, GPUs per node, bandwidths, peaks);
* ``dims``: the mesh shape (TP, CP, PP, DP, EP, expert TP, axis order); ``mesh``: its ranks, groups and links;
* ``stages``: what each pipeline stage holds;
* ``accounting``: the bookkeeping conventions (the lab page's and the engines' ledgers), as data: bytes per
  parameter, the data-parallel synchronisation schedules, which activation ledger applies.
"""
