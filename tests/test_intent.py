"""The intent contract: the additive model-memory annotation round-trips and is validated."""

from __future__ import annotations

from decimal import Decimal

import pytest

from intent.contract import Intent, IntentError, is_pool_name


def test_model_memory_round_trips_and_is_optional() -> None:
    intent = Intent(gpus=Decimal("0.5"), model="a100", source=("x:y",), model_memory_mib=81920)
    annotations = intent.to_annotations()
    assert annotations["gpu-intent.io/model-memory"] == "81920"
    assert Intent.from_annotations(annotations) == intent
    older = {k: v for k, v in annotations.items() if k != "gpu-intent.io/model-memory"}
    assert Intent.from_annotations(older) == Intent(
        gpus=Decimal("0.5"), model="a100", source=("x:y",)
    )  # what earlier webhooks wrote still reads


@pytest.mark.parametrize("raw", ["80GB", "-1", "0x10", "1" * 13])
def test_malformed_model_memory_is_an_intent_error(raw: str) -> None:
    annotations = {"gpu-intent.io/intent-version": "v1", "gpu-intent.io/gpus": "1",
                   "gpu-intent.io/model-memory": raw}  # fmt: skip
    with pytest.raises(IntentError, match="model-memory"):
        Intent.from_annotations(annotations)


def test_zero_model_memory_is_rejected() -> None:
    with pytest.raises(IntentError, match="model-memory"):
        Intent(gpus=Decimal(1), model_memory_mib=0)


@pytest.mark.parametrize(("name", "ok"), [("gpu-a", True), ("Pool_A", False), ("a" * 64, False)])
def test_is_pool_name(name: str, ok: bool) -> None:
    assert is_pool_name(name) is ok
