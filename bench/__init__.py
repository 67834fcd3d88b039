"""Benchmarks that print figures (``make bench`` or ``python -m bench``).

Every benchmark process runs the simulated cluster in process, with the garbage
collector tuned as ``gpu-intent`` tunes it (`intent.runtime.tune_gc`): the figures
are those of the product's settings, not of CPython's defaults.
"""

from intent.runtime import tune_gc

tune_gc()
