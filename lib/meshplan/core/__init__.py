"""The bottom layer: what every other layer may use and that uses nothing of the library.

* ``collectives``: ring costs of all-reduce, reduce-scatter, all-gather, all-to-all (bytes one rank sends);
* ``units``: GB, GiB, TFLOP and the formatting of numbers;
* ``resources``: where the data files live (``meshplan/data``);
* ``validation``: the one place where a count is checked and the error types a bad input raises.
"""
