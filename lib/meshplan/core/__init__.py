"""The bottom layer: what every other layer may use and that uses nothing of the library.

* ``collectives``: ring costs of all-reduce, reduce-scatter, all-gather, all-to-all (bytes one rank sends), and a
  ``Collective`` as data (what the bytes ledger sums and the step-time model prices);
* ``units``: GB, GiB, TFLOP and the formatting of numbers;
* ``resources``: where the data files live (``meshplan/data``);
* ``validation``: the one place where a count is checked and the error types a bad input raises;
* ``schemas``: the JSON Schemas of the data files (``data/schemas/``), checked with jsonschema, with messages that name
  the file and the field.
"""
