"""Which pods the webhook leaves alone, whatever the webhook configuration selects.

A purely computational module: no I/O. The chart's ``namespaceSelector`` already limits
the webhook to opted-in namespaces; this is defence in depth for a configuration that
selects too much (edited by hand, another chart, a selector typo). Skipped:

- pods in ``kube-system``: a webhook that touches the control plane's own pods can stop a
  cluster from healing (kubernetes.io, "Dynamic Admission Control", section "Avoiding
  operating on the kube-system namespace");
- pods in the namespace gpu-intent runs in (its release namespace): the webhook must not
  depend on itself to start, and the controller's trigger pods live there;
- the controller's trigger pods anywhere (`intent.contract.is_trigger`: labels
  ``gpu-intent.io/trigger=true`` and ``app.kubernetes.io/managed-by=gpu-intent``, set by
  ``controller.triggers``): a trigger already asks for whole GPUs Karpenter understands,
  and an intent on it would make the controller count it as demand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from intent.contract import is_trigger

__all__ = ["SYSTEM_NAMESPACES", "Scope"]

#: Namespaces always skipped.
SYSTEM_NAMESPACES: Final = frozenset({"kube-system"})


@dataclass(frozen=True, slots=True)
class Scope:
    """The namespaces whose pods the webhook never patches (trigger pods are never patched).

    Attributes:
        skip_namespaces: namespace names; `SYSTEM_NAMESPACES` plus, from `for_release`,
            the release namespace.
    """

    skip_namespaces: frozenset[str] = field(default=SYSTEM_NAMESPACES)

    @classmethod
    def for_release(cls, release_namespace: str | None, extra: Iterable[str] = ()) -> Scope:
        """`SYSTEM_NAMESPACES`, ``release_namespace`` (when given) and ``extra``."""
        names = set(SYSTEM_NAMESPACES) | set(extra)
        if release_namespace:
            names.add(release_namespace)
        return cls(frozenset(names))

    def skip_reason(self, request: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
        """Why the pod of a Pod CREATE ``request`` is out of scope, or None when it is not.

        ``request`` is an AdmissionReview ``request``; ``pod`` its ``object``. The
        namespace is ``request.namespace`` (the apiserver always sets it for a namespaced
        resource) or, failing that, ``metadata.namespace``; both are checked.
        """
        metadata = pod.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        for namespace in (request.get("namespace"), metadata.get("namespace")):
            if isinstance(namespace, str) and namespace in self.skip_namespaces:
                return f"namespace {namespace} is skipped"
        labels = metadata.get("labels")
        if isinstance(labels, dict) and is_trigger(labels):
            return "a gpu-intent trigger pod"
        return None
