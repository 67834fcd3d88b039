"""Placement and GPU memory variants, end to end: the real webhook and controller against
the sim, every NodeClaim the sim's store ever admitted counted (`NodeClaimCount`).

- A HAMi pod in a cluster with no NodePool whose nodes run HAMi's device plugin (none
  carries ``gpu: "on"``) buys nothing: the pod is told ``Unresolvable`` with the label to
  add and the setting to change, and ``gpu_intent_unplaceable_pods{layer="hami"}`` is 1.
- A pod selecting the 80 GB A100 gets a p4de.24xlarge, never the 40 GB p4d.24xlarge
  that shares its ``instance-gpu-name``.
"""

from __future__ import annotations

from e2e_support import Env, NodeClaimCount, eventually, settled
from test_e2e_exact import GPU_TOLERATION, kai_pod, node_of, status_of

from gpu_intent.demo import apply
from sim.store import NODEPOOLS


async def test_a_hami_pod_no_nodepool_can_place_buys_nothing(
    running: tuple[Env, NodeClaimCount],
) -> None:
    env, count = running
    env.cluster.store.delete(NODEPOOLS, None, "gpu-hami")  # the only pool with gpu=on
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vgpu", "namespace": "ml"},
        "spec": {
            "schedulerName": "hami-scheduler",
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {
                    "name": "c",
                    "image": "example.registry/notebook:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}},
                }
            ],
        },
    }
    await apply(env.api, pod)

    async def unresolvable() -> str | None:
        status = await status_of(env, "ml", "vgpu")
        return status.message if status is not None and status.phase == "Unresolvable" else None

    message = await eventually(unresolvable, 20)
    assert "gpu=on" in message and "--placement hami=" in message
    await settled(env)
    assert count.created == {}  # nothing bought
    assert await env.pods("gpu-intent-system") == []  # no trigger
    events = await env.events("ml", "vgpu")
    assert any(e["type"] == "Warning" and "gpu=on" in e["message"] for e in events)
    controller = env.running_controller
    assert controller is not None
    sample = controller.metrics.registry.get_sample_value
    assert sample("gpu_intent_unplaceable_pods", {"layer": "hami"}) == 1


async def test_an_80gb_a100_pod_gets_a_p4de_not_a_p4d(running: tuple[Env, NodeClaimCount]) -> None:
    env, count = running
    selector = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    await apply(env.api, kai_pod("big", {"gpu-fraction": "0.5"}, node_selector=selector))

    async def bound() -> str | None:
        return await node_of(env, "ml", "big")

    await eventually(bound, 30)
    await settled(env)
    [claim] = count.created.values()
    labels = claim["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "p4de.24xlarge"
    assert labels["karpenter.k8s.aws/instance-gpu-memory"] == "81920"


async def test_a_mig_slice_pod_buys_nothing_where_no_nodepool_makes_mig_nodes(
    running: tuple[Env, NodeClaimCount],
) -> None:
    """A pod asking for one ``nvidia.com/mig-1g.5gb`` slice gets an intent (1/7 of an
    A100); no example NodePool sets ``nvidia.com/mig.config``, so a whole A100 bought on a
    plain node would never advertise the slice: nothing is bought, and the pod is told
    why."""
    env, count = running
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "slice", "namespace": "ml"},
        "spec": {
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {
                    "name": "c",
                    "image": "example.registry/infer:1",
                    "resources": {"limits": {"nvidia.com/mig-1g.5gb": "1"}},
                }
            ],
        },
    }
    await apply(env.api, pod)

    async def unresolvable() -> str | None:
        status = await status_of(env, "ml", "slice")
        return status.message if status is not None and status.phase == "Unresolvable" else None

    message = await eventually(unresolvable, 20)
    assert "nvidia.com/mig.config" in message and "--placement mig=" in message
    await settled(env)
    assert count.created == {}
    assert await env.pods("gpu-intent-system") == []
