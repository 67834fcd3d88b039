"""What kube-apiserver does to a new pod before mutating webhooks see it, and right after.

Purely computational (randomness for the token volume name is injected). The pipeline of
the real create handler (k8s.io/apiserver ``pkg/endpoints/handlers/create.go``), which
`prepare_pod_for_admission` reproduces in order:

1. decoding applies the scheme defaults (kubernetes ``pkg/apis/core/v1/defaults.go``):
   ``schedulerName``, ``restartPolicy``, ``terminationGracePeriodSeconds: 30``,
   ``dnsPolicy``, ``securityContext: {}``, ``enableServiceLinks``; per container
   ``terminationMessagePath``/``Policy``, ``imagePullPolicy`` (``Always`` for ``:latest``
   or no tag, else ``IfNotPresent``), ``resources: {}``, port protocol, probe timings;
   volume ``defaultMode: 420``; requests default to limits for every resource named in
   limits (``SetDefaults_Pod``);
2. the field manager records a ``managedFields`` entry (operation ``Update``, manager from
   ``?fieldManager`` or the User-Agent up to its first ``/``) for the fields the request
   set (sigs.k8s.io/structured-merge-diff: the new object compared with the type's zero
   value; see `managed_fields`);
3. built-in mutating admission plugins: ``ServiceAccount`` (``serviceAccountName`` and
   ``serviceAccount: default``, a projected ``kube-api-access-<5 chars>`` volume mounted
   read-only at ``/var/run/secrets/kubernetes.io/serviceaccount`` in every container:
   plugin/pkg/admission/serviceaccount), ``Priority`` (``priority`` from the
   PriorityClass, 0 without one, ``preemptionPolicy: PreemptLowerPriority``:
   plugin/pkg/admission/priority) and ``DefaultTolerationSeconds`` (``not-ready`` and
   ``unreachable`` NoExecute tolerations for 300 s: plugin/pkg/admission/defaulttolerationseconds);
4. the webhooks see it with ``creationTimestamp: null``, no uid, no resourceVersion and
   ``status: {}`` (compare tests/fixtures/admission-reviews);
5. after admission ``PrepareForCreate`` (``pkg/registry/core/pod/strategy.go``) sets
   ``status.phase: Pending`` and ``status.qosClass`` (`pod_status_on_create`).

Keys are reordered into the Go structs' field order so JSON reads like the real server's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from intent.contract import IntentError
from intent.quantity import parse_quantity
from sim.store import ApiError, Obj

__all__ = [
    "SYSTEM_PRIORITY_CLASSES",
    "Forbidden",
    "apply_scheme_defaults",
    "managed_fields",
    "pod_status_on_create",
    "prepare_pod_for_admission",
]

SYSTEM_PRIORITY_CLASSES: Mapping[str, int] = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"

_META_ORDER = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
]
_SPEC_ORDER = [
    "volumes",
    "initContainers",
    "containers",
    "ephemeralContainers",
    "restartPolicy",
    "terminationGracePeriodSeconds",
    "activeDeadlineSeconds",
    "dnsPolicy",
    "nodeSelector",
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
    "nodeName",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "shareProcessNamespace",
    "securityContext",
    "imagePullSecrets",
    "hostname",
    "subdomain",
    "affinity",
    "schedulerName",
    "tolerations",
    "hostAliases",
    "priorityClassName",
    "priority",
    "dnsConfig",
    "readinessGates",
    "runtimeClassName",
    "enableServiceLinks",
    "preemptionPolicy",
    "overhead",
    "topologySpreadConstraints",
    "setHostnameAsFQDN",
    "os",
    "hostUsers",
    "schedulingGates",
    "resourceClaims",
    "resources",
]
_CONTAINER_ORDER = [
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "volumeMounts",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "securityContext",
    "stdin",
    "stdinOnce",
    "tty",
]


class Forbidden(ApiError):
    """403: an admission plugin refused the request."""

    code, reason = 403, "Forbidden"


def _ordered(obj: Mapping[str, Any], order: list[str]) -> dict[str, Any]:
    rank = {k: i for i, k in enumerate(order)}
    return dict(sorted(obj.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def _pull_policy(image: str) -> str:
    name = image.split("@", 1)[0]
    has_digest = "@" in image
    last = name.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else ("" if has_digest else "latest")
    return "Always" if tag == "latest" else "IfNotPresent"


def _default_probe(probe: dict[str, Any]) -> None:
    for key, value in (
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ):
        probe.setdefault(key, value)


def _default_container(c: dict[str, Any]) -> None:
    if "image" in c and "imagePullPolicy" not in c:
        c["imagePullPolicy"] = _pull_policy(str(c["image"]))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    resources = c.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if isinstance(c.get(probe), dict):
            _default_probe(c[probe])


def apply_scheme_defaults(pod: Obj) -> None:
    """Step 1: the v1 scheme defaults, in place (see the module doc)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or []:
            _default_container(container)
            if spec.get("hostNetwork"):
                for port in container.get("ports") or []:
                    port.setdefault("hostPort", port.get("containerPort"))
    for volume in spec.get("volumes") or []:
        for source in ("configMap", "secret", "projected", "downwardAPI"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 420)


# -- managedFields ------------------------------------------------------------------

#: List keys of the associative lists in a pod (``+listType=map`` / ``+listMapKey``).
_LIST_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("metadata", "ownerReferences"): ("uid",),
    ("spec", "containers"): ("name",),
    ("spec", "initContainers"): ("name",),
    ("spec", "volumes"): ("name",),
    ("spec", "containers", "env"): ("name",),
    ("spec", "initContainers", "env"): ("name",),
    ("spec", "containers", "volumeMounts"): ("mountPath",),
    ("spec", "initContainers", "volumeMounts"): ("mountPath",),
    ("spec", "containers", "ports"): ("containerPort", "protocol"),
    ("spec", "initContainers", "ports"): ("containerPort", "protocol"),
    ("status", "conditions"): ("type",),
}
_SET_LISTS = frozenset({("metadata", "finalizers")})
#: Atomic maps and list items (``+mapType=atomic``, ``+structType=atomic``).
_ATOMIC = frozenset({("spec", "nodeSelector"), ("metadata", "ownerReferences", "*")})
#: Fields the field manager never tracks (``fieldmanager`` StripMeta and reset fields).
_UNTRACKED_META = frozenset(
    [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
    ]
)
_MISSING = object()


def _node(value: Any, zero: Any, path: tuple[str, ...]) -> dict[str, Any] | None:
    """The fieldsV1 subtree for one field: None when the field is unchanged from the zero
    value and nothing below it is; ``{}`` for a leaf; children plus ``"."`` when the
    field itself is new and has children."""
    new_node = zero is _MISSING
    children: dict[str, Any] = {}
    if isinstance(value, dict) and path not in _ATOMIC:
        base = zero if isinstance(zero, dict) else {}
        for key, child in value.items():
            sub = _node(child, base.get(key, _MISSING), (*path, key))
            if sub is not None:
                children[f"f:{key}"] = sub
    elif isinstance(value, list) and path in _LIST_KEYS:
        for item in value:
            if not isinstance(item, dict):
                continue
            key = json.dumps(
                {k: item.get(k) for k in _LIST_KEYS[path]}, separators=(",", ":"), sort_keys=True
            )
            sub = _node(item, _MISSING, (*path, "*"))
            children[f"k:{key}"] = sub if sub is not None else {}
    elif isinstance(value, list) and path in _SET_LISTS:
        for item in value:
            children[f"v:{json.dumps(item)}"] = {}
    elif not new_node and value == zero:
        return None
    else:
        return {}
    if new_node:
        return {".": {}, **children} if children else {}
    return children or None


def managed_fields(obj: Mapping[str, Any], manager: str, api_version: str, time: str) -> list[Obj]:
    """Step 2: the ``metadata.managedFields`` a create records: one ``Update`` entry by
    ``manager`` holding the fields ``obj`` sets (``[]`` when it sets none)."""
    zero: dict[str, Any] = {"metadata": {"creationTimestamp": None}}
    if obj.get("kind") == "Pod":
        zero.update(spec={"containers": None}, status={})
    tracked = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
    tracked["metadata"] = {
        k: v for k, v in (obj.get("metadata") or {}).items() if k not in _UNTRACKED_META
    }
    fields = _node(tracked, zero, ())
    if not fields:
        return []
    entry = {"manager": manager, "operation": "Update", "apiVersion": api_version, "time": time}
    return [{**entry, "fieldsType": "FieldsV1", "fieldsV1": fields}]


# -- admission plugins --------------------------------------------------------------


def _service_account(pod: Obj, rng: random.Random) -> None:
    meta, spec = pod["metadata"], pod["spec"]
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    if spec.get("automountServiceAccountToken") is False:
        return
    volumes = spec.get("volumes") or []
    existing = next(
        (v["name"] for v in volumes if str(v.get("name", "")).startswith("kube-api-access-")), None
    )
    name = existing or "kube-api-access-" + "".join(rng.choice(_NAME_CHARS) for _ in range(5))
    needed = False
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or []:
            mounts = container.get("volumeMounts") or []
            if not any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                container["volumeMounts"] = [
                    *mounts,
                    {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH},
                ]
                needed = True
    if needed and existing is None:
        spec["volumes"] = [*volumes, {"name": name, "projected": {"sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ], "defaultMode": 420}}]  # fmt: skip


def _priority(pod: Obj, classes: Mapping[str, int], forbid: Callable[[str], ApiError]) -> None:
    spec = pod["spec"]
    class_name = spec.get("priorityClassName")
    if class_name:
        if class_name not in classes:
            raise forbid(f"no PriorityClass with name {class_name} was found")
        priority = int(classes[class_name])
    else:
        priority = 0
    if spec.get("priority") is not None and spec["priority"] != priority:
        raise forbid(
            f"the integer value of priority ({spec['priority']}) must not be provided in pod "
            f"spec; priority admission controller computed {priority} from the given PriorityClass name"
        )
    spec["priority"] = priority
    policy = spec.get("preemptionPolicy")
    if policy is not None and policy != "PreemptLowerPriority":
        raise forbid(
            f"the string value of PreemptionPolicy ({policy}) must not be provided in pod spec; "
            "priority admission controller computed PreemptLowerPriority from the given PriorityClass name"
        )
    spec["preemptionPolicy"] = "PreemptLowerPriority"


def _default_toleration_seconds(pod: Obj) -> None:
    tolerations = pod["spec"].get("tolerations") or []
    added = list(tolerations)
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(
            t.get("key", "") in (key, "") and t.get("effect", "") in ("NoExecute", "")
            for t in tolerations
        ):
            added.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    if added:
        pod["spec"]["tolerations"] = added


def prepare_pod_for_admission(
    pod: Obj,
    *,
    manager: str,
    time: str,
    rng: random.Random | None = None,
    priority_classes: Mapping[str, int] = SYSTEM_PRIORITY_CLASSES,
) -> Obj:
    """Steps 1-4 of the module doc on a new pod (``kind``/``apiVersion``/``metadata.namespace``
    already set); returns the object mutating webhooks receive. Raises `Forbidden` (403)
    from the Priority plugin: unknown ``priorityClassName``, or a ``priority`` or
    ``preemptionPolicy`` that differs from the class's."""
    rng = rng or random.Random()
    apply_scheme_defaults(pod)
    meta = pod.setdefault("metadata", {})
    for key in (
        "uid",
        "resourceVersion",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ):
        meta.pop(key, None)
    meta["creationTimestamp"] = None
    entries = managed_fields(pod, manager, "v1", time)
    if entries:
        meta["managedFields"] = entries

    def forbid(message: str) -> ApiError:
        name = meta.get("name")
        return Forbidden(
            f'pods "{name}" is forbidden: {message}' if name else f"pods is forbidden: {message}"
        )

    _service_account(pod, rng)
    _priority(pod, priority_classes, forbid)
    _default_toleration_seconds(pod)
    pod["status"] = {}
    return reorder_pod(pod)


def reorder_pod(pod: Obj) -> Obj:
    """``pod`` with keys in Go struct order (top level, metadata, spec, containers)."""
    spec = _ordered(pod.get("spec") or {}, _SPEC_ORDER)
    for kind in ("initContainers", "containers"):
        if kind in spec:
            spec[kind] = [_ordered(c, _CONTAINER_ORDER) for c in spec[kind]]
    out = _ordered(pod, ["kind", "apiVersion", "metadata", "spec", "status"])
    out["metadata"] = _ordered(pod.get("metadata") or {}, _META_ORDER)
    out["spec"] = spec
    return out


def _amount(value: Any) -> Decimal | str:
    try:
        return parse_quantity(value, "resources")
    except IntentError:
        return str(value)


def _qos(spec: Mapping[str, Any]) -> str:
    """``GetPodQOS`` (pkg/apis/core/helper/qos): only cpu and memory count."""
    requests_seen = limits_seen = False
    guaranteed = True
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        requests = {
            k: v for k, v in (resources.get("requests") or {}).items() if k in ("cpu", "memory")
        }
        limits = {
            k: v for k, v in (resources.get("limits") or {}).items() if k in ("cpu", "memory")
        }
        requests_seen |= bool(requests)
        limits_seen |= bool(limits)
        if set(limits) != {"cpu", "memory"} or any(
            _amount(requests.get(k, v)) != _amount(v) for k, v in limits.items()
        ):
            guaranteed = False
    if not requests_seen and not limits_seen:
        return "BestEffort"
    return "Guaranteed" if guaranteed and limits_seen else "Burstable"


def pod_status_on_create(pod: Mapping[str, Any]) -> Obj:
    """Step 5: the status ``PrepareForCreate`` gives a new pod (``phase: Pending`` and the
    QoS class), whatever status the request carried."""
    return {"phase": "Pending", "qosClass": _qos(pod.get("spec") or {})}
