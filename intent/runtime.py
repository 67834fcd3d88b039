"""Process-wide runtime settings shared by every long-running command, and the YAML
loader every command reads large files with (`SAFE_LOADER`).

The controller caches thousands of pending pods, triggers and NodeClaims as plain JSON
dicts, and the simulated cluster (demo, benchmarks) stores every object the same way:
heaps of a few million objects, almost none of them in reference cycles (refcounting
frees them). CPython's cyclic garbage collector is tuned for the opposite. With its
default thresholds (700, 10, 10), a full collection runs whenever the objects that
survived two younger collections since the last one exceed a quarter of the long-lived
heap (CPython ``Modules/gcmodule.c``, ``collect_generations``: ``long_lived_pending <
long_lived_total / 4``), so a heap that grows tenfold is scanned whole about ten times.
In ``bench.burst`` (10,000 pods turning Unschedulable at once) that was 11 full
collections of up to 0.27 s in the controller (1.6 s of CPU in 20 s) and 16 of up to
0.61 s in the simulated API server (4.0 s); with `GC_THRESHOLDS`, none in either.
"""

from __future__ import annotations

import gc
from typing import Any, Final

import yaml

#: PyYAML's safe loader in C (libyaml's ``CSafeLoader``, in PyYAML's wheels), else its
#: pure-Python ``SafeLoader``: the same documents, about eight times faster. For
#: ``yaml.load(text, Loader=SAFE_LOADER)``. Reading 1,000 pods' manifests took 2.1 s in
#: Python and 0.28 s in C; the built-in GPU catalog 66 ms and 5 ms.
SAFE_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: `gc.set_threshold` values: a young collection every 10,000 net allocations of
#: container objects (default 700), the middle generation every 10 of those (default),
#: and a full collection considered only after 100 middle ones (default 10), i.e. every
#: ten million net allocations, still subject to CPython's quarter-of-the-heap rule.
#: Only objects in reference cycles wait for a collection; everything else is freed as
#: soon as it is unreferenced, so memory does not grow by more than the cycles made
#: between two collections.
GC_THRESHOLDS = (10_000, 10, 100)


def tune_gc(young: int = GC_THRESHOLDS[0], *, freeze: bool = False) -> None:
    """Set the cyclic garbage collector's thresholds to `GC_THRESHOLDS` for this
    process (why: module docstring), with ``young`` net allocations between two young
    collections. ``freeze``: first move everything alive now (modules, classes,
    functions: what a server loaded before it serves) to the permanent generation
    (`gc.freeze`), which no collection walks. Idempotent; raises nothing."""
    if freeze:
        gc.freeze()
    gc.set_threshold(young, *GC_THRESHOLDS[1:])
