"""The GPU catalog: spellings, memory variants, instance types, and overrides from a file."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpu_intent.cli import build_parser
from gpu_intent.cli.common import UsageError, read_catalog
from gpu_intent.cli.webhook import serve_options
from intent import catalog as catalog_module
from intent.catalog import Catalog, CatalogError, default_catalog, load_catalog
from intent.inference import infer, infer_intent
from webhook.review import admit
from webhook.server import make_app, start


@pytest.mark.parametrize(
    ("raw", "gpu_id"),
    [
        ("NVIDIA-A100-SXM4-80GB", "a100-80gb"),
        ("nvidia-a100-80gb", "a100-80gb"),
        ("A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA-A100-SXM4-40GB", "a100-40gb"),
        ("nvidia-tesla-a100", "a100-40gb"),
        ("NVIDIA-H100-80GB-HBM3", "h100-80gb"),
        ("Tesla V100-SXM2-32GB", "v100-32gb"),
        ("Tesla-V100-SXM2-16GB", "v100-16gb"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("AMD_Instinct_MI300X", "mi300x"),
        ("Tesla-T4", "t4"),
    ],
)
def test_spellings_name_one_variant(raw: str, gpu_id: str) -> None:
    found = default_catalog().lookup(raw)
    assert found is not None and found.gpu is not None
    assert found.gpu.id == gpu_id


def test_a_model_with_several_variants_names_none_of_them() -> None:
    found = default_catalog().lookup("A100")
    assert found is not None
    assert (found.model, found.gpu) == ("a100", None)


def test_mig_slice_is_a_slice_of_the_40gb_a100() -> None:
    found = default_catalog().lookup("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
    assert found is not None and found.gpu is not None
    assert (found.gpu.id, found.mig, found.mig_slices, found.gpu.mig_slices) == (
        "a100-40gb", "1g.5gb", 1, 7
    )


def test_a10_is_not_found_inside_a100() -> None:
    found = default_catalog().lookup("NVIDIA-A10")
    assert found is not None and found.model == "a10"


@pytest.mark.parametrize("raw", ["${GPU_TYPE}", "", "cpu", "nvidia"])
def test_unknown_spellings_name_nothing(raw: str) -> None:
    assert default_catalog().lookup(raw) is None


@pytest.mark.parametrize(
    ("raw", "provider", "count", "gpu_id"),
    [
        ("p4d.24xlarge", "aws", 8, "a100-40gb"),
        ("p4de.24xlarge", "aws", 8, "a100-80gb"),
        ("g6e.2xlarge", "aws", 1, "l40s"),
        ("g6e.metal", "aws", None, "l40s"),  # not listed: its family
        ("Standard_ND96isr_MI300X_v5", "azure", 8, "mi300x"),
        ("standard_nc24ads_a100_v4", "azure", 1, "a100-80gb"),
        ("a2-ultragpu-1g", "gcp", 1, "a100-80gb"),
        ("g2-standard-24", "gcp", 2, "l4"),
        ("GN7.2XLARGE32", "tke", None, "t4"),
    ],
)
def test_instance_types(raw: str, provider: str, count: int | None, gpu_id: str) -> None:
    found = default_catalog().instance_type(raw)
    assert found is not None
    assert (found.provider, found.count, found.gpu.id) == (provider, count, gpu_id)


def test_cpu_instance_type_has_no_gpu() -> None:
    assert default_catalog().instance_type("m5.large") is None


def test_override_adds_and_replaces_entries(tmp_path: Path) -> None:
    override = tmp_path / "catalog.yaml"
    override.write_text(
        "gpus:\n"
        "  rtx-pro-6000:\n"
        "    model: rtx-pro-6000\n"
        "    vendor: nvidia\n"
        "    memory_mib: 98304\n"
        "    aliases: [NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition]\n"
        "  t4:\n"
        "    model: t4\n"
        "    vendor: nvidia\n"
        "    memory_mib: 15360\n"
        "instance_types:\n"
        "  aws:\n"
        "    g7e.2xlarge: [1, rtx-pro-6000]\n"
        "families:\n"
        "  tke:\n"
        "    GN7: l4\n"
    )
    catalog = load_catalog(override)
    found = catalog.lookup("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition")
    assert found is not None and found.model == "rtx-pro-6000"
    t4 = catalog.lookup("Tesla-T4")  # the alias went with the replaced entry
    assert t4 is not None and t4.gpu is not None and t4.gpu.memory_mib == 15360
    assert catalog.instance_type("g7e.2xlarge") is not None
    tke = catalog.instance_type("GN7.2XLARGE32")
    assert tke is not None and tke.gpu.model == "l4"
    assert catalog.instance_type("p4d.24xlarge") is not None  # the rest is still there
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                    "nodeSelector": {"node.kubernetes.io/instance-type": "g7e.2xlarge"}}}  # fmt: skip
    intent = infer_intent(pod, catalog)
    assert intent is not None and intent.model == "rtx-pro-6000"
    assert infer_intent(pod) is not None and infer_intent(pod).model is None  # type: ignore[union-attr]


#: A pod on the AWS g6e family (L40S in the built-in catalog).
G6E_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
             "nodeSelector": {"karpenter.k8s.aws/instance-family": "g6e"}},
}  # fmt: skip


def a100_g6e(tmp_path: Path) -> Catalog:
    """The built-in catalog with the g6e family said to hold A100 80 GB GPUs."""
    override = tmp_path / "c.yaml"
    override.write_text("families:\n  aws:\n    g6e: a100-80gb\n")
    return load_catalog(override)


def review_of(pod: dict[str, Any]) -> dict[str, Any]:
    request = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "namespace": "ns", "operation": "CREATE", "object": pod}  # fmt: skip
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def patched_model(answer: dict[str, Any]) -> str:
    """The ``gpu-intent.io/model`` value an AdmissionReview response's patch writes."""
    (op,) = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert op["path"] == "/metadata/annotations"
    model: str = op["value"]["gpu-intent.io/model"]
    return model


def test_inference_reads_the_catalog_it_is_given_and_the_built_in_one_otherwise(
    tmp_path: Path,
) -> None:
    catalog = a100_g6e(tmp_path)
    for _ in range(2):  # in either order: nothing is remembered between calls
        intent = infer_intent(G6E_POD, catalog)
        assert intent is not None and intent.model == "a100"
        intent = infer_intent(G6E_POD)
        assert intent is not None and intent.model == "l40s"
    assert infer(G6E_POD, default_catalog()) == infer(G6E_POD)


def test_reviews_infer_with_the_catalog_they_are_given(tmp_path: Path) -> None:
    catalog = a100_g6e(tmp_path)
    body = review_of(G6E_POD)
    assert patched_model(dict(admit(body, catalog=catalog).response)) == "a100"
    assert patched_model(dict(admit(body).response)) == "l40s"


async def test_two_webhook_apps_in_one_process_use_their_own_catalogs(tmp_path: Path) -> None:
    """No catalog is process-wide: two apps side by side, one given a catalog, each
    answers the same review from its own."""
    body = review_of(G6E_POD)
    runners = [
        await start(make_app(catalog=a100_g6e(tmp_path)), "127.0.0.1", 0, None),
        await start(make_app(), "127.0.0.1", 0, None),
    ]
    try:
        models = []
        async with aiohttp.ClientSession() as session:
            for runner in runners:
                host, port = runner.addresses[0][:2]
                async with session.post(f"http://{host}:{port}/mutate", json=body) as resp:
                    assert resp.status == 200
                    models.append(patched_model(await resp.json()))
        assert models == ["a100", "l40s"]
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_the_first_review_after_a_start_does_not_pay_for_loading_the_catalog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parsing the built-in catalog costs several times a review's CPU budget: a webhook
    that loaded it on its first review left that pod unannotated (``deadline``). The
    app loads it when it is made, so the first review after a start is patched."""
    monkeypatch.setattr(catalog_module, "_default", None)  # as in a fresh process
    runner = await start(make_app(), "127.0.0.1", 0, None)
    try:
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}/mutate"
        async with aiohttp.ClientSession() as session, session.post(url, json=review_of(G6E_POD)) as resp:
            assert resp.status == 200
            answer = await resp.json()
        assert "warnings" not in answer["response"]
        assert patched_model(answer) == "l40s"
    finally:
        await runner.cleanup()


def test_catalog_flag_reaches_the_webhook_options(tmp_path: Path) -> None:
    override = tmp_path / "c.yaml"
    override.write_text("families:\n  aws:\n    g6e: a100-80gb\n")
    argv = ["webhook", "--tls-cert-file", "c", "--tls-key-file", "k"]
    args = build_parser().parse_args([*argv, "--catalog", str(override)])
    catalog = read_catalog(args)
    g6e = catalog.family("g6e") if catalog is not None else None
    assert g6e is not None and g6e.gpu.model == "a100"
    assert serve_options(args, catalog).catalog is catalog
    assert read_catalog(build_parser().parse_args(argv)) is None  # the built-in one
    override.write_text("gpus: [1]\n")
    with pytest.raises(UsageError, match="gpus: must be a mapping"):
        read_catalog(args)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("gpus: [1]\n", "gpus: must be a mapping"),
        ("gpus:\n  x: {model: X, vendor: nvidia, memory_mib: 1}\n", r"gpus.x.model: must be a lowercase"),
        ("gpus:\n  x: {model: x, vendor: intel, memory_mib: 1}\n", r"gpus.x.vendor"),
        ("gpus:\n  x: {model: x, vendor: nvidia, memory_mib: -5}\n", r"gpus.x.memory_mib"),
        ("gpus:\n  x: {model: x, vendor: nvidia, memory_mib: 1, colour: red}\n", "unknown fields colour"),
        ("instance_types:\n  aws:\n    a.b: [2, nope]\n", "names GPU 'nope'"),
        ("instance_types:\n  aws:\n    a.b: 2\n", r"must be \[GPU count, GPU id\]"),
        ("gpu: {}\n", "unknown sections gpu"),
        ("gpus: {\n", "not YAML"),
    ],
)
def test_malformed_override_names_file_and_field(tmp_path: Path, text: str, match: str) -> None:
    override = tmp_path / "bad.yaml"
    override.write_text(text)
    with pytest.raises(CatalogError, match=match) as caught:
        load_catalog(override)
    assert str(override) in str(caught.value)


def test_missing_override_file_is_a_catalog_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "absent.yaml")


def test_lookups_are_remembered() -> None:
    catalog = load_catalog()
    first = catalog.lookup("NVIDIA-L40S")
    assert catalog.lookup("nvidia-l40s") is first
