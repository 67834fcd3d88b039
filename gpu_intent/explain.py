"""``gpu-intent explain``: each pod template's GPU intent and the reasoning, offline.

Reads Kubernetes manifests (several YAML or JSON documents per file) and, for every pod
template in them, runs the webhook's own inference (`intent.inference.infer`, pure) and
reports what the webhook would write and why. No cluster is contacted.

Pod templates are found through a table (`gpu_intent.kinds.KINDS`): kind -> where its
templates sit (paths with ``[]`` and ``*`` wildcards) and their shape (a pod template, a
PodSpec, an Argo template, a KServe component, KAITO's instance type, a Trainer v2
TrainJob's ``resourcesPerNode``). A kind not in the table is said so, with the kinds it
knows; a ``List``'s items are read as top-level objects.

DRA: a pod template's ``spec.resourceClaims`` are resolved against the ResourceClaims and
ResourceClaimTemplates (``resource.k8s.io``, any served version) of the same input, by
name in the same namespace (an object without a namespace matches any); a claim not
there gets `intent.inference.infer`'s "could not be read" warning.

Pure but for `read_documents`, which reads the files.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from gpu_intent import kinds
from intent.catalog import Catalog, default_catalog
from intent.contract import (
    ANNOTATION_SOURCE,
    ANNOTATION_VERSION,
    DOMAIN,
    Intent,
    IntentError,
    Source,
)
from intent.dra import ClaimSource, claim_spec, pod_claims
from intent.inference import Reason, infer

__all__ = [
    "Document",
    "ExplainError",
    "Explanation",
    "Template",
    "explain",
    "find_templates",
    "read_documents",
    "render_json",
    "render_text",
]

_SUFFIXES: Final = (".yaml", ".yml", ".json")


class ExplainError(ValueError):
    """An input cannot be read or is not YAML; the message names the file."""


@dataclass(frozen=True, slots=True)
class Document:
    """One parsed YAML document: ``file`` as given (``-`` for stdin), ``index`` 1-based."""

    file: str
    index: int
    body: object


@dataclass(frozen=True, slots=True)
class Template:
    """One pod template found in a document.

    Attributes:
        kind, namespace, name: of the manifest's top-level object (``name`` is
            ``generateName*`` when only that is set, ``?`` when neither is).
        path: where the template sits in the object (``spec.template``), ``""`` for a Pod.
        pod: the template as a pod: ``{"metadata": ..., "spec": ...}``.
        hints: models the workload names outside the pod (`intent.inference.infer`'s
            ``model_hints``: a RayService's ``accelerator_type``).
        error: why no pod could be read there (a kind explain does not know, a KAITO
            instance type not in the catalog), else ``""``.
    """

    document: Document
    kind: str
    namespace: str
    name: str
    path: str
    pod: Mapping[str, Any]
    hints: tuple[tuple[Source, str], ...] = ()
    error: str = ""

    @property
    def title(self) -> str:
        ref = f"{self.namespace}/{self.name}" if self.namespace else self.name
        where = f" {self.path}" if self.path else ""
        return f"{self.kind} {ref}{where} ({self.document.file}, document {self.document.index})"


@dataclass(frozen=True, slots=True)
class Explanation:
    """What the webhook would do with one pod template, and why.

    Attributes:
        status: ``annotated`` (it would write ``annotations``), ``not-gpu`` (it asks for no
            GPU), ``already-annotated`` (it carries ``gpu-intent.io/intent-version``: the
            webhook leaves it, the controller reads ``annotations``), ``error`` (the
            webhook would let it through with ``error`` as warning and no intent) or
            ``unknown-kind`` (explain does not know where the kind's pod templates sit;
            ``error`` lists the kinds it knows).
        annotations: the intent annotations, keys under ``gpu-intent.io/``.
    """

    template: Template
    status: str
    annotations: dict[str, str] = field(default_factory=dict)
    reasons: tuple[Reason, ...] = ()
    warnings: tuple[str, ...] = ()
    error: str = ""


def _name(metadata: Mapping[str, Any]) -> str:
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name
    generate = metadata.get("generateName")
    return f"{generate}*" if isinstance(generate, str) and generate else "?"


def find_templates(document: Document, catalog: Catalog | None = None) -> list[Template]:
    """The pod templates of one document, found through `KINDS` (see `gpu_intent.kinds`),
    in table order. A ``List``'s items count as top-level objects; a kind without pod
    templates (`NO_TEMPLATES`) yields nothing; a kind the table does not know yields one
    template of shape ``unknown`` whose `Template.error` lists the kinds it knows.
    Non-objects yield nothing. ``catalog`` (default the built-in) reads KAITO instance types."""
    body = document.body
    if not isinstance(body, Mapping):
        return []
    if body.get("kind") == "List" and isinstance(body.get("items"), list):
        return [
            t
            for item in body["items"]
            for t in find_templates(Document(document.file, document.index, item), catalog)
        ]
    metadata = body.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    kind = str(body.get("kind") or "?")
    namespace = metadata.get("namespace")
    namespace = namespace if isinstance(namespace, str) else ""
    return [
        Template(document, kind, namespace, _name(metadata), t.path, t.pod, t.hints, t.error)
        for t in kinds.templates(body, catalog or default_catalog())
    ]


_CLAIM_KINDS: Final = ("ResourceClaim", "ResourceClaimTemplate")
#: ``(kind, name)`` -> ``[(namespace, object)]`` of the input's claims and claim templates.
ClaimIndex = dict[tuple[str, str], list[tuple[str, Mapping[str, Any]]]]


def _objects(body: object) -> Iterator[Mapping[str, Any]]:
    if isinstance(body, Mapping):
        if body.get("kind") == "List" and isinstance(body.get("items"), list):
            for item in body["items"]:
                yield from _objects(item)
        else:
            yield body


def claim_index(objects: Iterable[object]) -> ClaimIndex:
    """The ResourceClaims and ResourceClaimTemplates (``resource.k8s.io/*``) among
    ``objects`` (manifests; ``List`` items are read) by kind and name. Pure."""
    found: ClaimIndex = {}
    for item in objects:
        for body in _objects(item):
            kind = body.get("kind")
            api = str(body.get("apiVersion") or "")
            metadata = body.get("metadata")
            if kind not in _CLAIM_KINDS or not api.startswith("resource.k8s.io/") \
                    or not isinstance(metadata, Mapping):  # fmt: skip
                continue
            name, namespace = metadata.get("name"), metadata.get("namespace")
            if isinstance(name, str) and name:
                ns = namespace if isinstance(namespace, str) else ""
                found.setdefault((str(kind), name), []).append((ns, body))
    return found


def resolve_claims(
    pod: Mapping[str, Any], namespace: str, claims: ClaimIndex
) -> list[ClaimSource] | None:
    """The DRA claims of ``pod`` (in ``namespace``, "" for any) found in ``claims`` (None
    when it has none); a claim created from a template by the resourceclaim controller is
    read from the template. Raises IntentError for malformed ``spec.resourceClaims``."""
    entries = pod_claims(pod)
    if not entries:
        return None
    out: list[ClaimSource] = []
    for entry in entries:
        kind, name = ("ResourceClaimTemplate", entry.template) if entry.template \
            else ("ResourceClaim", entry.claim)  # fmt: skip
        for where, body in claims.get((kind, name or ""), []):
            if not where or not namespace or where == namespace:
                out.append(ClaimSource(entry.entry, name or "", claim_spec(body)))
                break
    return out


def _explain_one(template: Template, catalog: Catalog | None, claims: ClaimIndex) -> Explanation:
    if template.error:
        status = "unknown-kind" if not template.path and not template.pod else "error"
        return Explanation(template, status, error=template.error)
    metadata = template.pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if isinstance(annotations, Mapping) and ANNOTATION_VERSION in annotations:
        mine = {k: str(v) for k, v in annotations.items() if str(k).startswith(f"{DOMAIN}/")}
        try:
            Intent.from_annotations(mine)
        except IntentError as e:
            return Explanation(
                template, "error", mine, error=f"its intent annotations do not parse: {e}"
            )
        why = "carries gpu-intent.io/intent-version: the webhook leaves it as written"
        reason = Reason("intent", "", mine.get(ANNOTATION_SOURCE, ""), why)
        return Explanation(template, "already-annotated", mine, (reason,))
    try:
        claimed = resolve_claims(template.pod, template.namespace, claims)
        inference = infer(template.pod, catalog, claims=claimed, model_hints=template.hints)
    except IntentError as e:
        return Explanation(template, "error", error=f"cannot infer GPU intent: {e}")
    if inference.intent is None:
        return Explanation(template, "not-gpu", warnings=inference.warnings)
    return Explanation(
        template,
        "annotated",
        inference.intent.to_annotations(),
        inference.reasons,
        inference.warnings,
    )


def explain(documents: Iterable[Document], catalog: Catalog | None = None) -> list[Explanation]:
    """One `Explanation` per pod template in ``documents``, in order (``catalog``: the GPU
    catalog, default the built-in one); DRA claims resolve against the ResourceClaims and
    ResourceClaimTemplates among ``documents``. Pure: a function of its arguments."""
    documents = list(documents)
    claims = claim_index(d.body for d in documents)
    return [_explain_one(t, catalog, claims) for d in documents for t in find_templates(d, catalog)]


def _load(text: str, file: str) -> list[Document]:
    try:
        bodies = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise ExplainError(f"{file}: not YAML: {' '.join(str(e).split())}") from e
    return [Document(file, i, body) for i, body in enumerate(bodies, 1) if body is not None]


def read_documents(files: Sequence[str]) -> list[Document]:
    """The YAML documents of ``files`` in order: ``-`` is standard input; a directory is
    its ``*.yaml``, ``*.yml`` and ``*.json`` files, sorted by name.

    Raises:
        ExplainError: a file cannot be read or is not YAML (the message names it).
    """
    documents: list[Document] = []
    for name in files:
        if name == "-":
            documents += _load(sys.stdin.read(), "-")
            continue
        path = Path(name)
        paths = (
            sorted(p for p in path.iterdir() if p.suffix in _SUFFIXES) if path.is_dir() else [path]
        )
        for p in paths:
            try:
                text = p.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise ExplainError(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from e
            documents += _load(text, str(p))
    return documents


def render_json(explanations: Sequence[Explanation]) -> str:
    """A JSON list, one object per pod template: ``file``, ``document``, ``kind``,
    ``namespace``, ``name``, ``template`` (its path), ``status``, ``annotations`` (the
    annotation values under their keys), ``reasons`` (``part``, ``value``, ``source``,
    ``why``), ``warnings``, ``error``."""
    out = [
        {
            "file": e.template.document.file,
            "document": e.template.document.index,
            "kind": e.template.kind,
            "namespace": e.template.namespace,
            "name": e.template.name,
            "template": e.template.path,
            "status": e.status,
            "annotations": e.annotations,
            "reasons": [
                {"part": r.part, "value": r.value, "source": r.source, "why": r.why}
                for r in e.reasons
            ],
            "warnings": list(e.warnings),
            "error": e.error,
        }
        for e in explanations
    ]
    return json.dumps(out, indent=2)


_STATUS: Final = {
    "not-gpu": "no GPU demand: the webhook leaves it alone",
    "already-annotated": "already annotated: the webhook leaves it, the controller reads:",
}


def render_text(explanations: Sequence[Explanation]) -> str:
    """The explanations for a person: per template a title, then each part of the intent
    with its value, sources and reasoning, the source annotation and the warnings."""
    if not explanations:
        return "no pod templates found\n"
    lines: list[str] = []
    for e in explanations:
        lines.append(e.template.title)
        if e.status in _STATUS:
            lines.append(f"  {_STATUS[e.status]}")
        if e.status == "error":
            lines.append(f"  error: {e.error} (the webhook lets the pod through without an intent)")
        if e.status == "unknown-kind":
            lines.append(f"  {e.error}")
        if e.status == "already-annotated":
            lines += [f"  {k}: {v}" for k, v in sorted(e.annotations.items())]
        for r in e.reasons:
            if r.part == "intent":
                continue
            lines.append(
                f"  {r.part:<13} {r.value or '-':<8} {('from ' + r.source) if r.source else ''}".rstrip()
            )
            lines.append(f"  {'':<13} {r.why}")
        if e.status == "annotated":
            lines.append(f"  {ANNOTATION_SOURCE}: {e.annotations.get(ANNOTATION_SOURCE, '')}")
        lines += [f"  warning: {w}" for w in e.warnings]
        lines.append("")
    return "\n".join(lines)
