"""Dynamic Resource Allocation in the simulated cluster (sim.dra and its users).

The CEL helper and the allocator are tested as pure functions; everything else runs a
`SimCluster` and goes through kubernetes_asyncio (``ResourceV1Api``, ``CoreV1Api``,
``CustomObjectsApi``) against its HTTP API, as a client of a real cluster would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_support import FAST, NodeClaimCount, eventually
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from intent.kube import load_configuration
from sim import dra
from sim import store as sim_store
from sim.catalog import by_name
from sim.cluster import SimCluster
from sim.scheduling import fit_error_message

NS = "default"
GPU_TAINT_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
L4 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"'
A100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-40GB"'


# -- CEL ------------------------------------------------------------------------------


def _l4_device(index: int = 0) -> dict[str, Any]:
    return dra.gpu_devices(by_name("g6.12xlarge"), "node-a")[index]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (L4, True),
        (A100, False),
        ("device.driver == 'gpu.nvidia.com'", True),
        ("device.attributes['gpu.nvidia.com'].type == 'gpu'", True),
        ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')", True),
        ("device.attributes['gpu.nvidia.com'].productName.startsWith('Tesla')", False),
        ("device.attributes['gpu.nvidia.com'].architecture in ['Ampere', 'Ada Lovelace']", True),
        ("device.attributes['gpu.nvidia.com'].architecture in ['Hopper']", False),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('20Gi')) > 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('23034Mi')) == 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) < 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))", False),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('25G'))", True),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('24G'))", False),
        (
            "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.0.0'))",
            True,
        ),
        ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.major() == 8", True),
        ("device.attributes['gpu.nvidia.com'].index == 0", True),
        ("'productName' in device.attributes['gpu.nvidia.com']", True),
        ("'profile' in device.attributes['gpu.nvidia.com']", False),
        ("device.attributes['other.example.com'].size() == 0", True),
    ],
)
def test_cel_selectors_evaluate_against_a_published_device(expression: str, expected: bool) -> None:
    assert dra.device_matches(expression, dra.DRIVER, _l4_device()) is expected


@pytest.mark.parametrize(
    "expression",
    [
        "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'",  # no such attribute
        "device.driver ==",  # does not compile
        "device.driver",  # not a bool
        "device.capacity['gpu.nvidia.com'].memory.compareTo(1) == 0",  # not a quantity
        "quantity('lots').isLessThan(quantity('1'))",
    ],
)
def test_bad_selectors_raise_selector_error(expression: str) -> None:
    with pytest.raises(dra.SelectorError):
        dra.device_matches(expression, dra.DRIVER, _l4_device())


def test_device_classes_select_by_type() -> None:
    gpu, mig = (c["spec"]["selectors"][0]["cel"]["expression"] for c in dra.DEFAULT_DEVICE_CLASSES)
    assert dra.device_matches(gpu, dra.DRIVER, _l4_device())
    assert not dra.device_matches(mig, dra.DRIVER, _l4_device())
    assert not dra.device_matches(gpu, "other.example.com", _l4_device())


def test_devices_are_what_the_driver_publishes() -> None:
    devices = dra.gpu_devices(by_name("p4d.24xlarge"), "node-a")
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    first = devices[0]
    assert first["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-40GB"}
    assert first["attributes"]["architecture"] == {"string": "Ampere"}
    assert first["attributes"]["cudaComputeCapability"] == {"version": "8.0.0"}
    assert first["attributes"]["index"] == {"int": 0}
    assert first["capacity"] == {"memory": {"value": "40Gi"}}
    assert dra.gpu_devices(by_name("p5.48xlarge"), "n")[0]["capacity"]["memory"] == {
        "value": "81559Mi"
    }
    assert dra.gpu_devices(by_name("g4dn.xlarge"), "n")[0]["attributes"]["productName"] == {
        "string": "Tesla T4"
    }
    assert len({d["attributes"]["uuid"]["string"] for d in devices}) == 8
    assert dra.gpu_devices(by_name("m5.large"), "n") == []


def test_mig_nodes_publish_mig_devices_the_mig_class_selects() -> None:
    devices = dra.mig_devices(by_name("p4d.24xlarge"), "node-a", "all-1g.5gb")
    assert devices is not None and len(devices) == 8 * 7
    first = devices[0]
    assert first["name"] == "gpu-0-mig-19-0-1"
    assert devices[6]["name"] == "gpu-0-mig-19-6-1"
    assert first["attributes"]["profile"] == {"string": "1g.5gb"}
    assert first["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-40GB"}
    assert first["capacity"]["memory"] == {"value": "4864Mi"}
    assert first["capacity"]["memorySlice0"] == {"value": "1"}
    gpu, mig = (c["spec"]["selectors"][0]["cel"]["expression"] for c in dra.DEFAULT_DEVICE_CLASSES)
    assert dra.device_matches(mig, dra.DRIVER, first)
    assert not dra.device_matches(gpu, dra.DRIVER, first)
    three = dra.mig_devices(by_name("p4d.24xlarge"), "n", "all-3g.20gb")
    assert three is not None and [d["name"] for d in three[:2]] == [
        "gpu-0-mig-9-0-4",
        "gpu-0-mig-9-4-4",
    ]
    assert dra.mig_devices(by_name("g6.xlarge"), "n", "all-1g.5gb") is None  # no MIG on L4
    assert dra.mig_devices(by_name("p4d.24xlarge"), "n", "all-disabled") is None

    state = _state(instance_type="p4d.24xlarge")
    assert not state.devices["node-a"][0][0][2].startswith("gpu-0-mig")  # no label: whole GPUs
    node = {
        "metadata": {
            "name": "node-a",
            "uid": "u",
            "labels": {
                **dra.DRA_NODE_LABELS,
                dra.MIG_CONFIG_LABEL: "all-1g.5gb",
                "node.kubernetes.io/instance-type": "p4d.24xlarge",
            },
        }
    }
    rs = dra.resource_slice(node)
    assert rs is not None
    state = dra.DraState.build(dra.DEFAULT_DEVICE_CLASSES, [rs], [])
    claim = _claim(
        "mig",
        {"name": "slice", "exactly": {"deviceClassName": "mig.nvidia.com", "count": 2,
         "selectors": [{"cel": {"expression":
                        "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"}}]}},
    )  # fmt: skip
    assert _devices(dra.allocate([claim], "node-a", state), "mig") == [
        "gpu-0-mig-19-0-1",
        "gpu-0-mig-19-1-1",
    ]


# -- allocation (pure) ------------------------------------------------------------------


def _claim(name: str, *requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": list(requests), **devices}},
    }


def _exactly(name: str, *selectors: str, **fields: Any) -> dict[str, Any]:
    exact = {"deviceClassName": "gpu.nvidia.com", **fields}
    if selectors:
        exact["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exact}


def _state(*claims: dict[str, Any], instance_type: str = "g6.12xlarge") -> dra.DraState:
    node = {
        "metadata": {
            "name": "node-a",
            "uid": "uid-node-a",
            "labels": {**dra.DRA_NODE_LABELS, "node.kubernetes.io/instance-type": instance_type},
        }
    }
    rs = dra.resource_slice(node)
    assert rs is not None
    return dra.DraState.build(dra.DEFAULT_DEVICE_CLASSES, [rs], claims)


def _devices(result: Any, claim: str) -> list[str]:
    assert not isinstance(result, str), result
    return [d[2] for _, d in result[(NS, claim)]]


def test_allocation_counts_modes_and_alternatives() -> None:
    state = _state()
    two = _claim("two", _exactly("gpu", L4, count=2))
    assert _devices(dra.allocate([two], "node-a", state), "two") == ["gpu-0", "gpu-1"]
    every = _claim("all", _exactly("gpu", allocationMode="All"))
    assert _devices(dra.allocate([every], "node-a", state), "all") == [f"gpu-{i}" for i in range(4)]
    assert dra.allocate([_claim("a100", _exactly("gpu", A100))], "node-a", state) == (
        dra.CANNOT_ALLOCATE
    )
    assert dra.allocate([_claim("five", _exactly("gpu", count=5))], "node-a", state) == (
        dra.CANNOT_ALLOCATE
    )
    assert dra.allocate([two], "node-b", state) == dra.CANNOT_ALLOCATE  # no slice there
    first = _claim(
        "first",
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu.nvidia.com",
                 "selectors": [{"cel": {"expression": A100}}]},
                {"name": "any", "deviceClassName": "gpu.nvidia.com"},
            ],
        },
    )  # fmt: skip
    result = dra.allocate([first], "node-a", state)
    assert not isinstance(result, str)
    assert result[(NS, "first")] == [("gpu/any", (dra.DRIVER, "node-a", "gpu-0"))]
    missing_class = _claim("x", {"name": "gpu", "exactly": {"deviceClassName": "nope"}})
    assert dra.allocate([missing_class], "node-a", state) == dra.CANNOT_ALLOCATE


def test_allocation_skips_taken_devices_and_honours_allocated_claims() -> None:
    held = _claim("held", _exactly("gpu", count=3))
    held["status"] = {
        "allocation": dra.allocation_status(
            [("gpu", (dra.DRIVER, "node-a", f"gpu-{i}")) for i in range(3)], "node-a"
        )
    }
    state = _state(held)
    assert _devices(dra.allocate([_claim("one", _exactly("gpu"))], "node-a", state), "one") == [
        "gpu-3"
    ]
    assert dra.allocate([_claim("two", _exactly("gpu", count=2))], "node-a", state) == (
        dra.CANNOT_ALLOCATE
    )
    assert dra.allocate(
        [_claim("all", _exactly("gpu", allocationMode="All"))], "node-a", state
    ) == (dra.CANNOT_ALLOCATE)
    assert dra.allocate([held], "node-a", state) == {}  # already allocated here: nothing to do
    assert dra.allocate([held], "node-b", state) == dra.CLAIM_NOT_ON_NODE


def test_match_attribute_constraints() -> None:
    state = _state()
    same = _claim(
        "same",
        _exactly("a", count=1),
        _exactly("b", count=1),
        constraints=[{"matchAttribute": "gpu.nvidia.com/productName"}],
    )
    assert _devices(dra.allocate([same], "node-a", state), "same") == ["gpu-0", "gpu-1"]
    # No two GPUs share an index: a constraint on it cannot hold across two devices.
    distinct = _claim(
        "distinct", _exactly("gpu", count=2), constraints=[{"matchAttribute": "index"}]
    )
    assert dra.allocate([distinct], "node-a", state) == dra.CANNOT_ALLOCATE


def test_pod_claims_resolve_names_and_say_why_not() -> None:
    claim = _claim("mine")
    claim["metadata"]["ownerReferences"] = [{"uid": "uid-p", "controller": True}]
    state = dra.DraState.build([], [], [claim, _claim("shared")])
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": NS, "uid": "uid-p"},
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "t"},
                {"name": "s", "resourceClaimName": "shared"},
            ]
        },
    }
    with pytest.raises(dra.ClaimError, match=r'^pod "default/p": ResourceClaim not created yet$'):
        dra.pod_claims(pod, state)
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "mine"}]}
    assert [c["metadata"]["name"] for c in dra.pod_claims(pod, state)] == ["mine", "shared"]
    pod["spec"]["resourceClaims"][1]["resourceClaimName"] = "gone"
    with pytest.raises(dra.ClaimError, match=r'^resourceclaim.resource.k8s.io "gone" not found$'):
        dra.pod_claims(pod, state)
    assert dra.has_dra_requirements(pod)
    assert not dra.has_dra_requirements({"spec": {"containers": [{"name": "c"}]}})
    assert dra.has_dra_requirements(
        {"spec": {"containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]}}
    )


def _finished_pod_and_its_claim(store: sim_store.Store, phase: str) -> None:
    store.create(sim_store.NAMESPACES, {"metadata": {"name": NS}})
    pod = store.create(
        sim_store.PODS,
        {"metadata": {"name": "job", "namespace": NS},
         "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}],
                  "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
         "status": {"phase": phase}},
    )  # fmt: skip
    claim = _claim("job-gpu-abcde", _exactly("gpu"))
    claim["metadata"] = {
        "name": "job-gpu-abcde",
        "namespace": NS,
        "finalizers": [dra.DELETE_PROTECTION_FINALIZER],
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "job",
                             "uid": pod["metadata"]["uid"], "controller": True}],
    }  # fmt: skip
    created = store.create(sim_store.RESOURCECLAIMS, claim)
    created["status"] = {
        "allocation": dra.allocation_status([("gpu", (dra.DRIVER, "node-a", "gpu-0"))], "node-a"),
        "reservedFor": [{"resource": "pods", "name": "job", "uid": pod["metadata"]["uid"]}],
    }
    store.update(sim_store.RESOURCECLAIMS, created, subresource="status")


def test_a_finished_pods_claim_is_deallocated_and_deleted() -> None:
    store = sim_store.Store()
    _finished_pod_and_its_claim(store, "Succeeded")
    dra.ResourceClaimController(store).sync_once()
    assert store.list(sim_store.RESOURCECLAIMS)[0] == []


def test_a_running_pods_claim_is_kept() -> None:
    store = sim_store.Store()
    _finished_pod_and_its_claim(store, "Running")
    dra.ResourceClaimController(store).sync_once()
    (claim,) = store.list(sim_store.RESOURCECLAIMS)[0]
    assert claim["status"]["allocation"] and claim["status"]["reservedFor"]


# -- the cluster ------------------------------------------------------------------------


@dataclass
class Dra:
    cluster: SimCluster
    api: client.ApiClient

    @property
    def resource(self) -> client.ResourceV1Api:
        return client.ResourceV1Api(self.api)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    async def pod(self, name: str) -> dict[str, Any]:
        response = await self.core.read_namespaced_pod(name, NS, _preload_content=False)
        return dict(await response.json())

    async def claim(self, name: str) -> dict[str, Any]:
        response = await self.resource.read_namespaced_resource_claim(
            name, NS, _preload_content=False
        )
        return dict(await response.json())

    async def claims(self) -> list[dict[str, Any]]:
        response = await self.resource.list_namespaced_resource_claim(NS, _preload_content=False)
        return list((await response.json())["items"])

    async def slices(self) -> list[dict[str, Any]]:
        response = await self.resource.list_resource_slice(_preload_content=False)
        return list((await response.json())["items"])

    async def nodeclaims(self) -> list[dict[str, Any]]:
        got = await client.CustomObjectsApi(self.api).list_cluster_custom_object(
            "karpenter.sh", "v1", "nodeclaims"
        )
        return list(got["items"])

    async def events(self, name: str) -> list[dict[str, Any]]:
        response = await self.core.list_namespaced_event(
            NS, field_selector=f"involvedObject.name={name}", _preload_content=False
        )
        return list((await response.json())["items"])

    async def scheduled(self, name: str) -> dict[str, Any]:
        pod = await self.pod(name)
        return next(
            (c for c in pod["status"].get("conditions") or () if c["type"] == "PodScheduled"), {}
        )

    async def create_pod(self, name: str, **spec: Any) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "tolerations": [GPU_TAINT_TOLERATION],
                "containers": [{"name": "main", "image": "cuda:12", **spec.pop("container", {})}],
                **spec,
            },
        }
        await self.core.create_namespaced_pod(NS, body)

    async def create_dra_pod(self, name: str, claim: str, *, template: bool = True) -> None:
        key = "resourceClaimTemplateName" if template else "resourceClaimName"
        await self.create_pod(
            name,
            container={"resources": {"claims": [{"name": "gpu"}]}},
            resourceClaims=[{"name": "gpu", key: claim}],
        )

    async def create_template(self, name: str, *requests: dict[str, Any]) -> None:
        await self.resource.create_namespaced_resource_claim_template(
            NS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name},
                "spec": {"spec": {"devices": {"requests": list(requests)}}},
            },
        )


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Dra]:
    async with SimCluster(tmp_path, karpenter=FAST, scheduler_resync_seconds=0.1) as cluster:
        cfg = await load_configuration(str(cluster.kubeconfig))
        api = client.ApiClient(configuration=cfg)
        try:
            yield Dra(cluster, api)
            assert cluster.failed_components() == []
        finally:
            await api.close()


async def test_resource_api_round_trips_through_resource_v1_api(sim: Dra) -> None:
    resource = sim.resource
    groups = await client.ApisApi(sim.api).get_api_versions()
    assert "resource.k8s.io" in {g.name for g in groups.groups}
    listed = await resource.get_api_resources()
    names = {r.name: r for r in listed.resources}
    assert {"deviceclasses", "resourceslices", "resourceclaims", "resourceclaims/status",
            "resourceclaimtemplates"} <= set(names)  # fmt: skip
    assert not names["deviceclasses"].namespaced and names["resourceclaims"].namespaced

    created = await resource.create_device_class(
        {"metadata": {"name": "l4.example.com"},
         "spec": {"selectors": [{"cel": {"expression": L4}}]}}
    )  # fmt: skip
    assert isinstance(created, client.V1DeviceClass)
    got = await resource.read_device_class("l4.example.com")
    assert got.spec.selectors[0].cel.expression == L4

    await sim.create_template("one-gpu", _exactly("gpu"))
    template = await resource.read_namespaced_resource_claim_template("one-gpu", NS)
    assert template.spec.spec.devices.requests[0].exactly.device_class_name == "gpu.nvidia.com"

    # kubernetes_asyncio 36.1.0 derives the watch's item type from the list's
    # ("V1ResourceClaimList" -> "V1ResourceClaim"), but the model is ResourceV1ResourceClaim.
    w = watch.Watch(return_type="ResourceV1ResourceClaim")
    seen: list[tuple[str, str]] = []

    async def follow() -> None:
        async for event in w.stream(resource.list_namespaced_resource_claim, NS, timeout_seconds=5):
            obj = event["object"]
            seen.append((event["type"], obj.metadata.name))
            if event["type"] == "MODIFIED":
                w.stop()

    follower = asyncio.create_task(follow())
    claim = await resource.create_namespaced_resource_claim(
        NS,
        {"metadata": {"name": "c1"}, "spec": {"devices": {"requests": [_exactly("gpu")]}},
         "status": {"reservedFor": [{"resource": "pods", "name": "x", "uid": "u"}]}},
    )  # fmt: skip
    assert isinstance(claim, client.ResourceV1ResourceClaim)
    assert claim.status is None or not claim.status.reserved_for  # status dropped on create
    patched = await resource.patch_namespaced_resource_claim_status(
        "c1", NS, {"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}}
    )
    assert patched.status.reserved_for[0].name == "p"
    await asyncio.wait_for(follower, 5)
    assert ("ADDED", "c1") in seen and ("MODIFIED", "c1") in seen
    listed_claims = await resource.list_namespaced_resource_claim(NS)
    assert [c.metadata.name for c in listed_claims.items] == ["c1"]

    with pytest.raises(ApiException) as e:  # ResourceClaim spec is immutable
        await resource.patch_namespaced_resource_claim(
            "c1", NS, {"spec": {"devices": {"requests": [_exactly("gpu", count=2)]}}}
        )
    assert e.value.status == 422 and "field is immutable" in str(e.value.body)

    rs = await resource.create_resource_slice(
        {"metadata": {"name": "manual"},
         "spec": {"driver": "example.com", "nodeName": "nowhere",
                  "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                  "devices": [{"name": "d0"}]}}
    )  # fmt: skip
    assert rs.spec.devices[0].name == "d0"
    await resource.delete_namespaced_resource_claim("c1", NS)
    await resource.delete_resource_slice("manual")
    assert (await resource.list_resource_slice()).items == []


async def test_pod_claims_are_validated(sim: Dra) -> None:
    with pytest.raises(ApiException) as e:
        await sim.create_pod(
            "bad",
            container={"resources": {"claims": [{"name": "gpu"}]}},
            resourceClaims=[{"name": "other", "resourceClaimName": "c"}],
        )
    assert e.value.status == 422
    assert json.loads(e.value.body)["message"] == (
        'Pod "bad" is invalid: spec.containers[0].resources.claims[0]: Not found: "gpu": '
        "must be one of the names in pod.spec.resourceClaims: other"
    )
    with pytest.raises(ApiException) as e:
        await sim.create_pod(
            "bad", resourceClaims=[{"name": "gpu", "resourceClaimName": "c",
                                    "resourceClaimTemplateName": "t"}]
        )  # fmt: skip
    assert e.value.status == 422 and "at most one of `resourceClaimName`" in str(e.value.body)
    with pytest.raises(ApiException) as e:
        await sim.create_pod("bad", resourceClaims=[{"name": "gpu"}])
    assert e.value.status == 422 and "must specify one of: `resourceClaimName`" in str(e.value.body)


async def test_default_device_classes_exist(sim: Dra) -> None:
    classes = await sim.resource.list_device_class()
    by_name_ = {c.metadata.name: c.spec.selectors[0].cel.expression for c in classes.items}
    assert by_name_ == {
        "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'gpu'",
        "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'mig'",
    }


async def test_a_template_claim_is_created_for_the_pod_and_recorded(sim: Dra) -> None:
    await sim.create_template("one-gpu", _exactly("gpu"))
    await sim.create_dra_pod("worker", "one-gpu")

    async def recorded() -> list[dict[str, Any]]:
        return list((await sim.pod("worker"))["status"].get("resourceClaimStatuses") or [])

    statuses = await eventually(recorded)
    assert len(statuses) == 1 and statuses[0]["name"] == "gpu"
    claim_name = statuses[0]["resourceClaimName"]
    assert claim_name.startswith("worker-gpu-") and len(claim_name) == len("worker-gpu-") + 5
    claim = await sim.claim(claim_name)
    pod = await sim.pod("worker")
    assert claim["metadata"]["annotations"] == {dra.POD_CLAIM_NAME_ANNOTATION: "gpu"}
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "worker", "uid": pod["metadata"]["uid"],
         "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.nvidia.com"

    await sim.core.delete_namespaced_pod("worker", NS)

    async def claim_gone() -> bool:
        return not await sim.claims()

    await eventually(claim_gone)


async def _cpu_node(cluster: SimCluster) -> None:
    """A Ready CPU node that is nobody's DRA node."""
    cluster.store.create(
        sim_store.NODES,
        {
            "metadata": {
                "name": "cpu-1",
                "labels": {"node.kubernetes.io/instance-type": "m5.large",
                           "kubernetes.io/hostname": "cpu-1"},
            },
            "status": {
                "allocatable": {"cpu": "2", "memory": "7Gi", "pods": "29"},
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )  # fmt: skip


async def test_a_dra_pod_without_a_dra_node_stays_pending_and_karpenter_skips_it(
    sim: Dra, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="sim.karpenter")
    count = NodeClaimCount(sim.cluster)
    try:
        await _cpu_node(sim.cluster)
        await client.CustomObjectsApi(sim.api).create_cluster_custom_object(
            "karpenter.sh", "v1", "nodepools",
            dra.nodepool("dra", [{"key": "karpenter.k8s.aws/instance-gpu-name",
                                  "operator": "In", "values": ["l4"]}]),
        )  # fmt: skip
        await sim.create_template("one-gpu", _exactly("gpu"))
        await sim.create_dra_pod("worker", "one-gpu")

        expected = fit_error_message(
            1,
            [[dra.CANNOT_ALLOCATE]],
            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        )

        async def unschedulable() -> bool:
            c = await sim.scheduled("worker")
            return c.get("reason") == "Unschedulable" and c.get("message") == expected

        await eventually(unschedulable)
        assert expected == (
            "0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are "
            "available: 1 Preemption is not helpful for scheduling.."
        )

        async def karpenter_event() -> list[dict[str, Any]]:
            return [
                e for e in await sim.events("worker")
                if e["source"].get("component") == "karpenter"
            ]  # fmt: skip

        events = await eventually(karpenter_event)
        assert events[0]["reason"] == "FailedScheduling"
        assert events[0]["message"] == f"Failed to schedule pod, {dra.KARPENTER_DRA_ERROR}"
        assert any(dra.KARPENTER_DRA_LOG in r.getMessage() for r in caplog.records)
        # Two more batches, each the pod's requeue (2 s) retried: still nothing bought.
        karpenter = sim.cluster.karpenter
        assert karpenter is not None
        await karpenter.batches(2, within=3 * (FAST.requeue_seconds + FAST.batch_max_seconds))
        assert count.created == {}
        assert await sim.nodeclaims() == []
        assert (await sim.pod("worker"))["status"]["phase"] == "Pending"
    finally:
        await count.close()


async def _dra_node(sim: Dra, instance_type: str) -> tuple[str, dict[str, Any]]:
    """A DRA NodePool for ``instance_type`` and a plain ``nvidia.com/gpu`` pod on it (a
    stand-in for a trigger): returns the node's name and its ResourceSlice."""
    await client.CustomObjectsApi(sim.api).create_cluster_custom_object(
        "karpenter.sh", "v1", "nodepools",
        dra.nodepool("dra", [{"key": "node.kubernetes.io/instance-type",
                              "operator": "In", "values": [instance_type]}]),
    )  # fmt: skip
    await sim.create_pod(
        "trigger",
        container={"resources": {"limits": {"nvidia.com/gpu": "1"}}},
    )

    async def node_name() -> str | None:
        claims = await sim.nodeclaims()
        return claims[0].get("status", {}).get("nodeName") if claims else None

    name = await eventually(node_name)

    async def node_slice() -> dict[str, Any] | None:
        return next((s for s in await sim.slices() if s["spec"]["nodeName"] == name), None)

    return str(name), await eventually(node_slice)


async def test_a_dra_node_comes_up_without_nvidia_gpu_and_publishes_its_gpus(sim: Dra) -> None:
    name, rs = await _dra_node(sim, "g6.xlarge")
    node = await sim.core.read_node(name, _preload_content=False)
    node_obj = await node.json()
    assert node_obj["metadata"]["labels"][next(iter(dra.DRA_NODE_LABELS))] == "false"
    assert "nvidia.com/gpu" not in node_obj["status"]["allocatable"]
    assert "nvidia.com/gpu" not in node_obj["status"]["capacity"]
    assert any(
        c["type"] == "Ready" and c["status"] == "True" for c in node_obj["status"]["conditions"]
    )

    async def not_registered() -> dict[str, Any] | None:
        claim = (await sim.nodeclaims())[0]
        cond = next(
            (c for c in claim["status"].get("conditions") or () if c["type"] == "Initialized"), {}
        )
        return cond if cond.get("reason") == "ResourceNotRegistered" else None

    initialized = await eventually(not_registered)
    assert initialized["status"] == "Unknown"
    assert initialized["message"] == 'Resource "nvidia.com/gpu" was requested but not registered'

    assert rs["metadata"]["name"].startswith(f"{name}-gpu.nvidia.com-")
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert rs["spec"]["driver"] == "gpu.nvidia.com"
    assert rs["spec"]["pool"] == {"name": name, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in rs["spec"]["devices"]] == ["gpu-0"]
    attrs = rs["spec"]["devices"][0]["attributes"]
    assert attrs["productName"] == {"string": "NVIDIA L4"}
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["architecture"] == {"string": "Ada Lovelace"}
    model = await sim.resource.read_resource_slice(rs["metadata"]["name"])
    assert model.spec.devices[0].capacity["memory"].value == "23034Mi"

    # The pod that asked for nvidia.com/gpu never fits: the node has none to offer.
    trigger = await sim.scheduled("trigger")
    assert trigger.get("status") != "True"

    await sim.create_template("l4", _exactly("gpu", L4))
    await sim.create_template("a100", _exactly("gpu", A100))
    await sim.create_dra_pod("on-l4", "l4")
    await sim.create_dra_pod("on-a100", "a100")

    async def bound() -> str | None:
        return (await sim.pod("on-l4"))["spec"].get("nodeName")

    assert await eventually(bound) == name
    pod = await sim.pod("on-l4")
    claim = await sim.claim(pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
    assert claim["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": name, "device": "gpu-0"}
    ]
    assert claim["status"]["allocation"]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
        ]
    }
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "on-l4", "uid": pod["metadata"]["uid"]}
    ]
    assert dra.DELETE_PROTECTION_FINALIZER in claim["metadata"]["finalizers"]
    assert len(await sim.nodeclaims()) == 1  # the trigger fits the uninitialized NodeClaim
    typed = await sim.resource.read_namespaced_resource_claim(claim["metadata"]["name"], NS)
    assert typed.status.allocation.devices.results[0].device == "gpu-0"

    async def a100_unschedulable() -> dict[str, Any] | None:
        c = await sim.scheduled("on-a100")
        return c if c.get("reason") == "Unschedulable" else None

    cond = await eventually(a100_unschedulable)
    assert f"1 {dra.CANNOT_ALLOCATE}" in cond["message"]

    # Node gone -> its slice goes.
    for nc in await sim.nodeclaims():
        await client.CustomObjectsApi(sim.api).delete_cluster_custom_object(
            "karpenter.sh", "v1", "nodeclaims", nc["metadata"]["name"]
        )

    async def slices_gone() -> bool:
        return not await sim.slices()

    await eventually(slices_gone)


async def test_counts_all_first_available_shared_claims_and_freeing(sim: Dra) -> None:
    name, rs = await _dra_node(sim, "g6.12xlarge")
    assert len(rs["spec"]["devices"]) == 4
    await sim.create_template("two", _exactly("gpu", L4, count=2))
    await sim.create_template(
        "first",
        {"name": "gpu", "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.nvidia.com",
             "selectors": [{"cel": {"expression": A100}}]},
            {"name": "any", "deviceClassName": "gpu.nvidia.com"},
        ]},
    )  # fmt: skip
    await sim.create_template("every", _exactly("gpu", allocationMode="All"))

    async def results(pod_name: str) -> list[dict[str, Any]] | None:
        pod = await sim.pod(pod_name)
        if not pod["spec"].get("nodeName"):
            return None
        claim = await sim.claim(pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
        return list(claim["status"]["allocation"]["devices"]["results"])

    await sim.create_dra_pod("two", "two")
    got = await eventually(lambda: results("two"))
    assert [r["device"] for r in got] == ["gpu-0", "gpu-1"]
    await sim.create_dra_pod("first", "first")
    got = await eventually(lambda: results("first"))
    assert [(r["request"], r["device"]) for r in got] == [("gpu/any", "gpu-2")]

    await sim.create_dra_pod("every", "every")

    async def every_unschedulable() -> bool:
        c = await sim.scheduled("every")
        return c.get("reason") == "Unschedulable" and dra.CANNOT_ALLOCATE in c.get("message", "")

    await eventually(every_unschedulable)

    # Deleting the pods frees their devices: their claims are deallocated and deleted.
    await sim.core.delete_namespaced_pod("two", NS)
    await sim.core.delete_namespaced_pod("first", NS)
    got = await eventually(lambda: results("every"), seconds=20)
    assert [r["device"] for r in got] == [f"gpu-{i}" for i in range(4)]
    assert len(await sim.claims()) == 1

    await sim.core.delete_namespaced_pod("every", NS)

    async def no_claims() -> bool:
        return not await sim.claims()

    await eventually(no_claims)

    # Two pods sharing one named ResourceClaim land on the same node and both reserve it.
    await sim.resource.create_namespaced_resource_claim(
        NS, {"metadata": {"name": "shared"}, "spec": {"devices": {"requests": [_exactly("gpu")]}}}
    )
    await sim.create_dra_pod("share-a", "shared", template=False)
    await sim.create_dra_pod("share-b", "shared", template=False)

    async def both_bound() -> list[str] | None:
        nodes = [(await sim.pod(p))["spec"].get("nodeName") for p in ("share-a", "share-b")]
        return [str(n) for n in nodes] if all(nodes) else None

    assert await eventually(both_bound) == [name, name]
    shared = await sim.claim("shared")
    assert sorted(r["name"] for r in shared["status"]["reservedFor"]) == ["share-a", "share-b"]
    assert len(shared["status"]["allocation"]["devices"]["results"]) == 1

    # The shared claim stays allocated while one pod holds it, and is freed (not deleted:
    # nobody generated it) when neither does.
    await sim.core.delete_namespaced_pod("share-a", NS)

    async def one_left() -> bool:
        reserved = (await sim.claim("shared"))["status"].get("reservedFor") or []
        return [r["name"] for r in reserved] == ["share-b"]

    await eventually(one_left)
    assert (await sim.claim("shared"))["status"]["allocation"]
    await sim.core.delete_namespaced_pod("share-b", NS)

    async def released() -> bool:
        claim = await sim.claim("shared")
        return not claim["status"].get("allocation") and not claim["metadata"].get("finalizers")

    await eventually(released)


async def test_a_pod_whose_claim_does_not_exist_is_not_tried(sim: Dra) -> None:
    await _cpu_node(sim.cluster)
    await sim.create_dra_pod("waiting", "missing", template=False)
    await sim.create_pod("plain")

    async def plain_bound() -> bool:
        return bool((await sim.pod("plain"))["spec"].get("nodeName"))

    await eventually(plain_bound)  # the scheduler made passes since the DRA pod arrived
    pod = await sim.pod("waiting")
    assert not pod["spec"].get("nodeName")
    assert not any(c["type"] == "PodScheduled" for c in pod["status"].get("conditions") or ())
    await sim.resource.create_namespaced_resource_claim(
        NS, {"metadata": {"name": "missing"}, "spec": {"devices": {"requests": [_exactly("gpu")]}}}
    )

    async def tried() -> bool:
        c = await sim.scheduled("waiting")
        return c.get("reason") == "Unschedulable" and dra.CANNOT_ALLOCATE in c.get("message", "")

    await eventually(tried)
