"""The discovery documents of the simulated apiserver.

Purely computational: shapes of ``/version`` (``version.Info``), ``/api``
(``APIVersions``), ``/apis`` (``APIGroupList``), ``/apis/<group>`` (``APIGroup``) and
``/api/v1``, ``/apis/<group>/<version>`` (``APIResourceList``), as k8s.io/apiserver
``pkg/endpoints/discovery`` serves them in the legacy (unaggregated) format, listing the
types of `store.RESOURCE_TYPES` and the verbs the sim implements.
"""

from __future__ import annotations

from typing import Any

from sim.store import EVENTS, NAMESPACES, NODES, PODS, RESOURCE_TYPES, Obj, ResourceType

__all__ = [
    "KUBERNETES_VERSION",
    "api_group",
    "api_group_list",
    "api_resource_list",
    "api_versions",
    "version_info",
]

#: The Kubernetes version the sim reports (the fixtures were captured from v1.32).
KUBERNETES_VERSION = "v1.32.0"
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
_SHORT_NAMES = {PODS: ["po"], NODES: ["no"], NAMESPACES: ["ns"], EVENTS: ["ev"]}


def version_info() -> Obj:
    """``GET /version``."""
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T00:00:00Z",
        "goVersion": "go1.23.4",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> Obj:
    """``GET /api``: the legacy core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _groups() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for rt in RESOURCE_TYPES:
        if rt.group and rt.version not in groups.setdefault(rt.group, []):
            groups[rt.group].append(rt.version)
    return groups


def api_group(name: str) -> Obj | None:
    """``GET /apis/<group>`` (None for a group the sim does not serve)."""
    versions = _groups().get(name)
    if versions is None:
        return None
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": listed,
        "preferredVersion": listed[0],
    }


def api_group_list() -> Obj:
    """``GET /apis``: every non-core group."""
    groups = [api_group(name) for name in sorted(_groups())]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _resource(rt: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.kind.lower(),
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(_VERBS),
    }
    if rt in _SHORT_NAMES:
        main["shortNames"] = _SHORT_NAMES[rt]
    if rt.group == "karpenter.sh":
        main["categories"] = ["karpenter"]
    entries = [main]
    if rt.has_status:
        entries.append({"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                        "kind": rt.kind, "verbs": ["get", "patch", "update"]})  # fmt: skip
    if rt is PODS:
        entries.append(
            {
                "name": "pods/binding",
                "singularName": "",
                "namespaced": True,
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
    return entries


def api_resource_list(group: str, version: str) -> Obj | None:
    """``GET /api/v1`` (group ``""``) or ``/apis/<group>/<version>``; None if not served."""
    types = [rt for rt in RESOURCE_TYPES if rt.group == group and rt.version == version]
    if not types:
        return None
    body: Obj = {"kind": "APIResourceList"}
    if group:
        body["apiVersion"] = "v1"
    body["groupVersion"] = f"{group}/{version}" if group else version
    body["resources"] = [entry for rt in types for entry in _resource(rt)]
    return body
