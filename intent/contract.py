"""The GPU intent contract: annotation keys and the `Intent` value both sides share.

The webhook writes an `Intent` onto a pod as annotations under ``gpu-intent.io/``; the
controller reads them back. This module is the only place that knows the keys and the
value formats, so the two sides cannot drift apart. It is purely computational: no I/O.

Annotation values (all strings, as Kubernetes requires):

==============================  ======================================================
``gpu-intent.io/intent-version``  contract version, ``"v1"``; present on every annotated pod
``gpu-intent.io/gpus``            GPUs the pod needs, a positive decimal (``"1"``, ``"0.5"``)
``gpu-intent.io/model``           canonical lowercase GPU model (``a100``, ``l4``), optional
``gpu-intent.io/pool``            Karpenter NodePool name the workload asked for, optional
``gpu-intent.io/gpu-memory``      GPU memory per GPU in MiB (integer), optional
``gpu-intent.io/model-memory``    MiB per GPU of the model *variant* the pod names (integer,
                                  optional, added in v1 without a version change): the 80 GB
                                  A100 is ``a100`` with ``81920``; never demand, so it does
                                  not change how GPUs are summed
``gpu-intent.io/source``          comma list of ``<where>:<key>`` the intent was inferred from
                                  (each a `Source`)
==============================  ======================================================

The controller adds ``gpu-intent.io/scale-up`` (see `ANNOTATION_SCALE_UP`) to report progress.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

DOMAIN = "gpu-intent.io"
CONTRACT_VERSION = "v1"

ANNOTATION_VERSION = f"{DOMAIN}/intent-version"
ANNOTATION_GPUS = f"{DOMAIN}/gpus"
ANNOTATION_MODEL = f"{DOMAIN}/model"
ANNOTATION_POOL = f"{DOMAIN}/pool"
ANNOTATION_GPU_MEMORY = f"{DOMAIN}/gpu-memory"
#: MiB per GPU of the model variant the pod names (additive: readers that do not know it
#: ignore it).
ANNOTATION_MODEL_MEMORY = f"{DOMAIN}/model-memory"
ANNOTATION_SOURCE = f"{DOMAIN}/source"
#: Written by the controller on real pods: a short human-readable scale-up status.
ANNOTATION_SCALE_UP = f"{DOMAIN}/scale-up"


class Phase(enum.StrEnum):
    """The ``phase`` of the `ANNOTATION_SCALE_UP` status (its JSON values are these
    strings; ``controller.model.ScaleUpStatus`` says what each means)."""

    NATIVE = "Native"
    UNRESOLVABLE = "Unresolvable"
    INVALID = "InvalidIntent"
    TRIGGERED = "Triggered"
    PROVISIONING = "Provisioning"
    NODE_READY = "NodeReady"
    SCHEDULED = "Scheduled"
    WAITING = "Waiting"
    FAILED = "Failed"



INTENT_ANNOTATIONS: tuple[str, ...] = (
    ANNOTATION_VERSION,
    ANNOTATION_GPUS,
    ANNOTATION_MODEL,
    ANNOTATION_POOL,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_MODEL_MEMORY,
    ANNOTATION_SOURCE,
)

#: Namespace label that opts a namespace in to the webhook.
INJECT_LABEL = f"{DOMAIN}/inject"
INJECT_VALUE = "enabled"

#: Labels every trigger pod carries; the controller only ever deletes pods with both.
TRIGGER_LABEL = f"{DOMAIN}/trigger"
TRIGGER_LABEL_VALUE = "true"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpu-intent"


#: Most GPUs one pod may ask for; more is a typo or an attack on the annotation.
MAX_GPUS = Decimal(10_000)
#: Largest MiB count a ``gpu-memory`` or ``model-memory`` annotation holds: twelve
#: decimal digits, the wire format's bound (about 0.9 EiB per GPU, far past any GPU). The
#: webhook leaves out a larger value it reads, so every intent it writes reads back.
MAX_MIB = 10**12 - 1
#: A label value (k8s.io/apimachinery validation.IsValidLabelValue): the model goes
#: into a trigger's node selector, so it must be one.
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")


def is_label_value(text: str) -> bool:
    """Whether ``text`` is a valid label value (k8s.io/apimachinery validation
    ``IsValidLabelValue``): at most 63 characters, alphanumeric at both ends, ``-_.``
    inside; the empty value is not accepted here."""
    return bool(_LABEL_VALUE.match(text))


#: A DNS-1123 subdomain (NodePool names): the pool goes into a label selector value too.
_POOL_NAME = re.compile(r"^[a-z0-9](?:[-a-z0-9.]{0,61}[a-z0-9])?$")


def is_pool_name(text: str) -> bool:
    """Whether ``text`` can be a ``gpu-intent.io/pool`` value: a DNS-1123 subdomain of at
    most 63 characters (a NodePool name that is also a label value)."""
    return bool(_POOL_NAME.match(text))


class IntentError(ValueError):
    """An intent annotation set, or a pod field it is inferred from, is malformed.

    The message names the offending key and value.
    """


@dataclass(frozen=True, slots=True, order=True)
class Source:
    """Where one part of an `Intent` was read: one token of `ANNOTATION_SOURCE`.

    Attributes:
        where: the kind of source: ``hami``, ``kai``, ``tensor-fusion``, ``resources``,
            ``nodeSelector``, ``nodeAffinity``, ``user``, ``dra``, ``mig``, or ``rule``
            for an ambiguity resolved by rule; no ``:`` nor ``,``.
        key: what was read there: a resource, annotation or label key
            (``nvidia.com/gpumem``), a claim name, a MIG profile, or the rule's name
            (``model-earlier-source``); no ``,``, may hold ``:``. ``""`` for a token
            without one (only read back from a hand-written annotation).

    ``token`` (also ``str``) is the annotation's text, ``where:key``
    (``hami:nvidia.com/gpumem``; ``where`` alone when ``key`` is empty), made once; `parse`
    reads one back, so ``Source.parse(s.token) == s``. Sorted by ``where``, then ``key``.
    Readers make the sources of fixed keys once, at import: a review makes few.

    Raises:
        IntentError: the token would be empty, or a part holds a character it may not.
    """

    where: str
    key: str = ""
    token: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where, key = self.where, self.key
        if ":" in where or "," in where or "," in key or not (where or key):
            raise IntentError(
                f"source ({where!r}, {key!r}) must be non-empty and comma-free,"
                " with no ':' in where"
            )
        object.__setattr__(self, "token", f"{where}:{key}" if key else where)

    def __str__(self) -> str:
        return self.token

    @classmethod
    def parse(cls, token: str) -> Source:
        """The source a token names: ``"hami:nvidia.com/gpumem"`` ->
        ``Source("hami", "nvidia.com/gpumem")``, split at the first ``:`` (a token
        without one is all ``where``; ``"x:"`` reads as ``Source("x")``).

        Raises:
            IntentError: ``token`` is empty or holds a ``,``.
        """
        where, _, key = token.partition(":")
        return cls(where, key)


@dataclass(frozen=True, slots=True)
class Intent:
    """What one pod needs in GPUs, as the webhook inferred it.

    Attributes:
        gpus: GPUs the pod needs in total, > 0; fractional for sharing layers
            (``Decimal("0.5")`` for a KAI ``gpu-fraction: "0.5"`` pod).
        model: canonical lowercase model name (``"a100"``, ``"l4"``), or None if the pod
            does not say.
        pool: Karpenter NodePool name the pod asked for, or None.
        gpu_memory_mib: GPU memory per GPU in MiB, or None when unknown.
        model_memory_mib: MiB per GPU of the model variant the pod names (``81920`` for
            the 80 GB A100), or None when the pod names no variant. Not demand.
        source: where each part was inferred from, in order, each once, e.g.
            ``(Source("hami", "nvidia.com/gpumem"), Source("hami", "nvidia.com/use-gputype"))``
            (annotation ``hami:nvidia.com/gpumem,hami:nvidia.com/use-gputype``); a token
            string is a `TypeError`.
    """

    gpus: Decimal
    model: str | None = None
    pool: str | None = None
    gpu_memory_mib: int | None = None
    source: tuple[Source, ...] = ()
    model_memory_mib: int | None = None

    def __post_init__(self) -> None:
        if not self.gpus.is_finite() or self.gpus <= 0 or self.gpus > MAX_GPUS:
            raise IntentError(f"gpus must be a number in (0, {MAX_GPUS}], got {self.gpus}")
        if self.model is not None and not _LABEL_VALUE.match(self.model):
            raise IntentError(f"model {self.model!r} is not a valid label value")
        if self.pool is not None and not _POOL_NAME.match(self.pool):
            raise IntentError(f"pool {self.pool!r} is not a valid NodePool name")
        for key, mib in (("gpu-memory", self.gpu_memory_mib), ("model-memory", self.model_memory_mib)):
            if mib is not None:
                check_mib(mib, key)
        for source in self.source:
            if type(source) is not Source:  # a token string: fail here, not where it is read
                raise TypeError(f"Intent.source holds {source!r}, not a Source")

    def to_annotations(self) -> dict[str, str]:
        """Render as pod annotations (keys from this module, string values)."""
        out = {
            ANNOTATION_VERSION: CONTRACT_VERSION,
            ANNOTATION_GPUS: format_gpus(self.gpus),
            ANNOTATION_SOURCE: ",".join([s.token for s in self.source]),
        }
        if self.model is not None:
            out[ANNOTATION_MODEL] = self.model
        if self.pool is not None:
            out[ANNOTATION_POOL] = self.pool
        if self.gpu_memory_mib is not None:
            out[ANNOTATION_GPU_MEMORY] = str(self.gpu_memory_mib)
        if self.model_memory_mib is not None:
            out[ANNOTATION_MODEL_MEMORY] = str(self.model_memory_mib)
        return out

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str] | None) -> Intent | None:
        """Read an intent back from pod annotations.

        Returns None when the pod carries no ``gpu-intent.io/intent-version`` annotation
        (it was never annotated). Raises `IntentError` when it carries one but the set is
        malformed (unknown version, missing or bad ``gpus``, bad ``gpu-memory`` or
        ``model-memory``): the controller must not act on a pod it cannot parse.
        """
        if not annotations or ANNOTATION_VERSION not in annotations:
            return None
        version = annotations[ANNOTATION_VERSION]
        if version != CONTRACT_VERSION:
            raise IntentError(f"{ANNOTATION_VERSION}={version!r} is not {CONTRACT_VERSION!r}")
        raw_gpus = annotations.get(ANNOTATION_GPUS)
        if raw_gpus is None:
            raise IntentError(f"{ANNOTATION_GPUS} is missing")
        gpus = parse_gpus(raw_gpus)
        memory = _mib(annotations, ANNOTATION_GPU_MEMORY)
        model_memory = _mib(annotations, ANNOTATION_MODEL_MEMORY)
        raw_source = annotations.get(ANNOTATION_SOURCE, "")
        source = tuple(Source.parse(t) for t in raw_source.split(",") if t)
        return cls(
            gpus=gpus,
            model=annotations.get(ANNOTATION_MODEL) or None,
            pool=annotations.get(ANNOTATION_POOL) or None,
            gpu_memory_mib=memory,
            source=source,
            model_memory_mib=model_memory,
        )


def check_mib(mib: int, where: str) -> int:
    """``mib`` if it is a MiB count the contract holds, 1 to `MAX_MIB`; the one bound
    both the webhook's readers and `Intent.from_annotations` apply.

    Raises:
        IntentError: ``mib`` is 0, negative or over `MAX_MIB`; the message starts with
            ``where`` (the field read).
    """
    if not 0 < mib <= MAX_MIB:
        raise IntentError(f"{where}: {mib} MiB is out of range (1 to {MAX_MIB})")
    return mib


def _mib(annotations: Mapping[str, str], key: str) -> int | None:
    """Annotation ``key`` as a MiB count (ASCII digits, 1 to `MAX_MIB`), None when absent."""
    raw = annotations.get(key)
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit() or len(raw) > 12:
        raise IntentError(f"{key}={raw!r} is not a MiB count")
    return check_mib(int(raw), key)


def parse_gpus(raw: str) -> Decimal:
    """Parse a ``gpus`` annotation value (``"1"``, ``"0.5"``) into a Decimal in
    (0, `MAX_GPUS`].

    Raises `IntentError` for anything else (``"abc"``, ``"-1"``, ``"NaN"``, ``"0"``,
    ``"1e9"``, over 32 characters).
    """
    if len(raw) > 32:
        raise IntentError(f"{ANNOTATION_GPUS} value is too long ({len(raw)} characters)")
    try:
        value = Decimal(raw.strip())
    except InvalidOperation as e:
        raise IntentError(f"{ANNOTATION_GPUS}={raw!r} is not a number") from e
    if not value.is_finite() or value <= 0 or value > MAX_GPUS:
        raise IntentError(f"{ANNOTATION_GPUS}={raw!r} must be a number in (0, {MAX_GPUS}]")
    return value


def format_gpus(value: Decimal) -> str:
    """Render a GPU count without exponent or trailing zeros: 1 -> "1", 0.50 -> "0.5"."""
    text = format(value.normalize(), "f")
    return text


def is_trigger(labels: Mapping[str, str] | None) -> bool:
    """True when ``labels`` mark a pod as a gpu-intent trigger (both ownership labels)."""
    if not labels:
        return False
    return (
        labels.get(TRIGGER_LABEL) == TRIGGER_LABEL_VALUE
        and labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
    )
