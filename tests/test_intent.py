"""The intent contract: the additive model-memory annotation round-trips and is validated."""

from __future__ import annotations

from decimal import Decimal

import pytest

from intent.contract import Intent, IntentError, Source, is_pool_name


def test_model_memory_round_trips_and_is_optional() -> None:
    intent = Intent(
        gpus=Decimal("0.5"), model="a100", source=(Source("x", "y"),), model_memory_mib=81920
    )
    annotations = intent.to_annotations()
    assert annotations["gpu-intent.io/model-memory"] == "81920"
    assert Intent.from_annotations(annotations) == intent
    older = {k: v for k, v in annotations.items() if k != "gpu-intent.io/model-memory"}
    assert Intent.from_annotations(older) == Intent(
        gpus=Decimal("0.5"), model="a100", source=(Source("x", "y"),)
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


# --- sources --------------------------------------------------------------------------


def test_sources_write_the_same_annotation_text_and_read_back() -> None:
    sources = (Source("hami", "nvidia.com/gpumem"), Source("rule", "model-earlier-source"))
    annotations = Intent(gpus=Decimal(1), source=sources).to_annotations()
    assert annotations["gpu-intent.io/source"] == "hami:nvidia.com/gpumem,rule:model-earlier-source"
    read = Intent.from_annotations(annotations)
    assert read is not None and read.source == sources
    assert Intent(gpus=Decimal(1)).to_annotations()["gpu-intent.io/source"] == ""


@pytest.mark.parametrize(
    ("token", "where", "key"),
    [
        ("hami:nvidia.com/gpumem", "hami", "nvidia.com/gpumem"),
        ("mig:1g.5gb", "mig", "1g.5gb"),
        ("x:a:b", "x", "a:b"),  # split at the first colon
        ("hand", "hand", ""),  # a hand-written token without one
        (":k", "", "k"),
    ],
)
def test_a_source_token_parses_into_where_and_key(token: str, where: str, key: str) -> None:
    source = Source.parse(token)
    assert (source.where, source.key) == (where, key)
    assert str(source) == token and Source.parse(str(source)) == source


def test_sources_sort_by_where_then_key() -> None:
    sources = [Source("user", "a"), Source("hami", "z"), Source("hami", "b")]
    assert [str(s) for s in sorted(sources)] == ["hami:b", "hami:z", "user:a"]


@pytest.mark.parametrize(("where", "key"), [("", ""), ("a,b", "c"), ("a", "b,c"), ("a:b", "c")])
def test_a_source_that_is_not_one_token_is_an_intent_error(where: str, key: str) -> None:
    with pytest.raises(IntentError, match="source"):
        Source(where, key)


def test_hand_written_source_annotation_reads_with_empty_tokens_dropped() -> None:
    annotations = {"gpu-intent.io/intent-version": "v1", "gpu-intent.io/gpus": "1",
                   "gpu-intent.io/source": "hand:written,,kai:gpu-fraction"}  # fmt: skip
    read = Intent.from_annotations(annotations)
    assert read is not None
    assert read.source == (Source("hand", "written"), Source("kai", "gpu-fraction"))


def test_a_token_string_is_not_a_source() -> None:
    with pytest.raises(TypeError, match="not a Source"):
        Intent(gpus=Decimal(1), source=("kai:gpu-fraction",))  # type: ignore[arg-type]
