"""Write issue 26's mixed workload as manifests for ``gpu-intent demo --examples DIR``
(or ``kubectl apply -f DIR`` on a real cluster).

The 160-pod mix, in the opted-in namespace ``ml``:

- HAMi A10G memory shares (34 pods): 16 x ``gpumem`` 8000 MiB, 16 x 6000 MiB and
  2 x two vGPUs of 10000 MiB;
- KAI fractions selecting their model by the GFD label ``nvidia.com/gpu.product``
  (96 pods): on T4 and on L4 each, 40 x ``gpu-fraction`` 0.25 and 8 x 0.5;
- KAI memory-only pods (6): ``gpu-memory`` 20000 MiB, any model;
- tensor-fusion L40S pods (8): ``vram-request`` 20Gi;
- native pods (16), which Karpenter serves alone: 8 x one T4, 2 x two T4, 4 x two L4
  and 2 x four L4.

The examples' Namespaces and NodePools come first, their ``nvidia.com/gpu`` limits
raised (`bench.cost.example_setup`). ``--pods N`` repeats the mix in order up to N pods
(the 1,000-pod mix of docs/benchmarks.md is ``--pods 1000``).

Usage: ``python -m bench.mix DIR [--pods N]``; DIR is created, the files in it replaced.
"""

from __future__ import annotations

import argparse
import copy
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import yaml

from bench.cost import example_setup, hami, kai_fraction, kai_memory, tensor_fusion, whole_gpu

MIX_PODS: Final = 160

Make = Callable[[str], dict[str, Any]]


#: (count, name prefix, pod maker) of one 160-pod mix.
MIX: Final[tuple[tuple[int, str, Make], ...]] = (
    (16, "hami-a10g", lambda n: hami(n, "A10G", 8000)),
    (16, "hami-a10g-small", lambda n: hami(n, "A10G", 6000)),
    (2, "hami-x2-a10g", lambda n: hami(n, "A10G", 10000, 2)),
    (40, "kai-q-t4", lambda n: kai_fraction(n, "t4", "0.25")),
    (8, "kai-h-t4", lambda n: kai_fraction(n, "t4", "0.5", "1")),
    (40, "kai-q-l4", lambda n: kai_fraction(n, "l4", "0.25")),
    (8, "kai-h-l4", lambda n: kai_fraction(n, "l4", "0.5", "1")),
    (6, "kai-mem", lambda n: kai_memory(n, 20000)),
    (8, "tf-l40s", lambda n: tensor_fusion(n, "l40s", "20Gi")),
    (8, "native-t4", lambda n: whole_gpu(n, "t4")),
    (2, "native-t4x2", lambda n: whole_gpu(n, "t4", 2)),
    (4, "native-l4x2", lambda n: whole_gpu(n, "l4", 2)),
    (2, "native-l4x4", lambda n: whole_gpu(n, "l4", 4)),
)


def _one_mix() -> Iterator[tuple[str, Make]]:
    for count, prefix, make in MIX:
        for _ in range(count):
            yield prefix, make


def mix_pods(pods: int = MIX_PODS) -> list[dict[str, Any]]:
    """The first ``pods`` pods of the mix repeated (see the module docstring), named
    ``<prefix>-<nnnn>`` in order of creation. Raises ValueError if ``pods`` < 1."""
    if pods < 1:
        raise ValueError(f"pods must be at least 1, not {pods}")
    chosen = itertools.islice(itertools.cycle(list(_one_mix())), pods)
    return [make(f"{prefix}-{i:04d}") for i, (prefix, make) in enumerate(chosen)]


def write_mix(directory: Path, pods: int = MIX_PODS) -> list[Path]:
    """Write ``00-setup.yaml`` (Namespaces and NodePools) and ``20-pods.yaml`` (the
    pods of `mix_pods`) into ``directory`` (created if missing); returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    setup = directory / "00-setup.yaml"
    setup.write_text(yaml.safe_dump_all(copy.deepcopy(example_setup()), sort_keys=False))
    workload = directory / "20-pods.yaml"
    workload.write_text(yaml.safe_dump_all(mix_pods(pods), sort_keys=False))
    return [setup, workload]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--pods", type=int, default=MIX_PODS, help="pods to write (160)")
    args = parser.parse_args()
    for path in write_mix(args.directory, args.pods):
        print(path)


if __name__ == "__main__":
    main()
