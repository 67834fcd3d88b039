"""Core v1 Secrets as kube-apiserver stores them: conversion, defaults and validation.

Purely computational; `sim.handlers` calls `prepare_secret` on every create, update and
patch before storage. What it does, after kubernetes ``pkg/apis/core``:

- ``stringData`` (write-only, plain text) is merged into ``data`` (base64), its keys
  winning, and never stored (``v1/conversion.go``, ``Convert_v1_Secret_To_core_Secret``);
- ``type`` defaults to ``Opaque`` (``v1/defaults.go``, ``SetDefaults_Secret``);
- validation (``validation/validation.go``, ``ValidateSecret`` and
  ``ValidateSecretUpdate``): every ``data`` value is base64 (the JSON decoding of
  ``[]byte`` rejects others with 400), keys match ``[-._a-zA-Z0-9]+`` and are at most 253
  characters, not ``.`` or ``..`` nor starting with ``..`` (``IsConfigMapKey``), the data
  totals at most 1 MiB (``MaxSecretSize``), a ``kubernetes.io/tls`` Secret holds
  ``tls.crt`` and ``tls.key``; on update ``type`` is immutable, and so are ``data`` and
  ``immutable`` itself once ``immutable: true`` was stored.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, Final

from sim.store import BadRequest, Obj
from sim.validation import FieldError

__all__ = ["MAX_SECRET_SIZE", "prepare_secret"]

#: Most bytes of decoded data a Secret may hold (``MaxSecretSize``, 1 MiB).
MAX_SECRET_SIZE: Final = 1024 * 1024
#: ``IsConfigMapKey``'s character set (k8s.io/apimachinery ``pkg/util/validation``).
_KEY = re.compile(r"[-._a-zA-Z0-9]+")
#: Keys a ``kubernetes.io/tls`` Secret must hold (``TLSCertKey``, ``TLSPrivateKeyKey``).
_TLS_KEYS: Final = ("tls.crt", "tls.key")


def _key_errors(path: str, key: str) -> list[FieldError]:
    if len(key) > 253:
        return [FieldError.invalid(path, key, "must be no more than 253 characters")]
    if not _KEY.fullmatch(key):
        return [
            FieldError.invalid(
                path,
                key,
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
                " (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for"
                " validation is '[-._a-zA-Z0-9]+')",
            )
        ]
    if key in (".", "..") or key.startswith(".."):
        return [FieldError.invalid(path, key, "must not be '.' or '..' or start with '..'")]
    return []


def _decoded_size(key: str, value: Any) -> int:
    if not isinstance(value, str):
        raise BadRequest(
            f'Secret in version "v1" cannot be handled as a Secret: data[{key}]: expected a base64 string'
        )
    try:
        return len(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        raise BadRequest(
            f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data in data[{key}]'
        ) from None


def prepare_secret(obj: Obj, old: Mapping[str, Any] | None) -> list[FieldError]:
    """Convert and default ``obj`` in place (``stringData`` into ``data``, ``type``
    ``Opaque``) and return its validation errors against ``old`` (None on create).

    Raises:
        BadRequest: a ``data`` value that is not base64 (the real decoder answers 400).
    """
    data = obj.get("data")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadRequest(
            'Secret in version "v1" cannot be handled as a Secret: data must be an object'
        )
    string_data = obj.pop("stringData", None) or {}
    if not isinstance(string_data, dict):
        raise BadRequest(
            'Secret in version "v1" cannot be handled as a Secret: stringData must be an object'
        )
    for key, text in string_data.items():
        data[key] = base64.b64encode(str(text).encode()).decode()
    if data:
        obj["data"] = data
    else:
        obj.pop("data", None)
    if not obj.get("type"):
        obj["type"] = "Opaque"
    errors: list[FieldError] = []
    size = 0
    for key, value in data.items():
        errors += _key_errors(f"data[{key}]", key)
        size += _decoded_size(key, value)
    if size > MAX_SECRET_SIZE:
        errors.append(
            FieldError.invalid("data", "", f"Too long: must have at most {MAX_SECRET_SIZE} bytes")
        )
    if obj["type"] == "kubernetes.io/tls":
        errors += [FieldError.required(f"data[{key}]") for key in _TLS_KEYS if key not in data]
    if old is not None:
        if obj["type"] != old.get("type", "Opaque"):
            errors.append(FieldError.invalid("type", obj["type"], "field is immutable"))
        if old.get("immutable"):
            if (old.get("data") or {}) != data:
                errors.append(
                    FieldError.forbidden("data", "field is immutable when `immutable` is set")
                )
            if not obj.get("immutable"):
                errors.append(
                    FieldError.forbidden("immutable", "field is immutable when `immutable` is set")
                )
    return errors
