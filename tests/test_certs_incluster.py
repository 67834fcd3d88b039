"""``gpu-intent certs --secret``: the Secret and caBundle through the sim's HTTP API, and a
renewal and CA rotation under traffic against the real webhook server."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes_asyncio import client
from webhook_support import SecretVolume, read_answer, until

from certs.incluster import CertsError, reconcile_secret
from certs.rotation import PROPAGATION_GRACE, CertSettings, parse_bundle
from intent.kube import load_configuration
from sim.faults import Faults
from sim.server import ApiServer
from sim.store import Store
from webhook.server import ServeOptions, serve

NS, SVC, SECRET, MWC_NAME = (
    "gpu-intent",
    "gpu-intent-webhook",
    "gpu-intent-webhook-tls",
    "gpu-intent",
)


def webhook_configuration(hooks: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": MWC_NAME},
        "webhooks": [
            {
                "name": f"pods{i}.gpu-intent.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {"service": {"name": SVC, "namespace": NS, "path": "/mutate"}},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            }
            for i in range(hooks)
        ],
    }


@dataclass
class Cluster:
    api: client.ApiClient
    faults: Faults
    kubeconfig: Path

    async def secret(self) -> dict[str, Any]:
        got = await client.CoreV1Api(self.api).read_namespaced_secret(SECRET, NS)
        return dict(self.api.sanitize_for_serialization(got))

    async def configuration(self) -> dict[str, Any]:
        got = await client.AdmissionregistrationV1Api(self.api).read_mutating_webhook_configuration(
            MWC_NAME
        )
        return dict(self.api.sanitize_for_serialization(got))

    async def bundles(self) -> list[bytes]:
        """Each webhook's caBundle, decoded."""
        hooks = (await self.configuration())["webhooks"]
        return [base64.b64decode(h["clientConfig"].get("caBundle") or "") for h in hooks]

    async def run(self, settings: CertSettings, now: datetime.datetime | None = None) -> Any:
        return await reconcile_secret(
            self.api, secret=SECRET, configuration=MWC_NAME, settings=settings, now=now
        )


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    faults = Faults()
    async with ApiServer(Store(), token="t0ken", faults=faults) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        api = client.ApiClient(configuration=await load_configuration(str(kubeconfig)))
        try:
            await client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
            await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
                webhook_configuration()
            )
            yield Cluster(api, faults, kubeconfig)
        finally:
            await api.close()


SETTINGS = CertSettings(SVC, NS)


async def test_first_run_creates_the_secret_and_fills_every_ca_bundle(cluster: Cluster) -> None:
    outcome = await cluster.run(SETTINGS)
    assert outcome.secret_written == "created" and outcome.webhooks_patched == 2
    secret = await cluster.secret()
    assert secret["type"] == "kubernetes.io/tls"
    assert sorted(secret["data"]) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    assert await cluster.bundles() == [ca_pem, ca_pem]
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(parse_bundle(ca_pem)[0])
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        SVC,
        f"{SVC}.{NS}",
        f"{SVC}.{NS}.svc",
        f"{SVC}.{NS}.svc.cluster.local",
    ]
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert datetime.timedelta(days=90) <= lifetime <= datetime.timedelta(days=90, minutes=6)


async def test_a_second_run_with_nothing_due_writes_nothing(cluster: Cluster) -> None:
    await cluster.run(SETTINGS)
    secret_rv = (await cluster.secret())["metadata"]["resourceVersion"]
    mwc_rv = (await cluster.configuration())["metadata"]["resourceVersion"]
    outcome = await cluster.run(SETTINGS)
    assert outcome.renewal.actions == () and outcome.secret_written is None
    assert outcome.webhooks_patched == 0
    assert "nothing due" in outcome.summary(SECRET, NS, MWC_NAME)
    assert (await cluster.secret())["metadata"]["resourceVersion"] == secret_rv
    assert (await cluster.configuration())["metadata"]["resourceVersion"] == mwc_rv


async def test_a_reset_ca_bundle_is_patched_back(cluster: Cluster) -> None:
    await cluster.run(SETTINGS)
    await client.AdmissionregistrationV1Api(cluster.api).patch_mutating_webhook_configuration(
        MWC_NAME, [{"op": "remove", "path": "/webhooks/1/clientConfig/caBundle"}]
    )
    outcome = await cluster.run(SETTINGS)
    assert outcome.webhooks_patched == 1 and outcome.secret_written is None
    first, second = await cluster.bundles()
    assert first == second != b""


async def test_a_conflicting_writer_is_retried(cluster: Cluster) -> None:
    await cluster.run(SETTINGS)
    cluster.faults.add("conflict", verb="update", resource="secrets", count=2)
    outcome = await cluster.run(CertSettings(SVC, NS, days=365, renew_before_days=100))
    assert outcome.attempts == 3 and outcome.secret_written == "updated"


async def test_a_missing_webhook_configuration_is_one_clear_error(cluster: Cluster) -> None:
    await client.AdmissionregistrationV1Api(cluster.api).delete_mutating_webhook_configuration(
        MWC_NAME
    )
    with pytest.raises(CertsError, match=f"MutatingWebhookConfiguration {MWC_NAME} not found"):
        await cluster.run(SETTINGS)


# --- renewal and CA rotation under traffic --------------------------------------------


def _files(secret: dict[str, Any]) -> tuple[bytes, bytes]:
    data = secret["data"]
    return base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"])


async def test_renewal_and_ca_rotation_fail_no_request(cluster: Cluster, tmp_path: Path) -> None:
    """The webhook serves the Secret's pair from a kubelet-style volume; a client that
    trusts exactly the caBundle it reads from the webhook configuration (as kube-apiserver
    does) calls it without pause while the serving certificate is renewed, the CA rotated
    and the old CA dropped."""
    from test_webhook_server import free_port

    first = await cluster.run(CertSettings(SVC, NS, days=90, ca_days=200, renew_before_days=30))
    assert first.secret_written == "created"
    volume = SecretVolume(tmp_path / "volume")
    volume.rotate(*_files(await cluster.secret()))
    port, stop = free_port(), asyncio.Event()
    task = asyncio.create_task(
        serve(
            "127.0.0.1",
            port,
            volume.cert,
            volume.key,
            options=ServeOptions(reload_interval=0.05),
            stop=stop,
        )
    )
    serials: list[int] = []
    bundle_sizes: list[int] = []
    failures: list[BaseException] = []
    done = asyncio.Event()

    async def call() -> None:
        bundle = (await cluster.bundles())[0]
        bundle_sizes.append(len(parse_bundle(bundle)))
        context = ssl.create_default_context(cadata=bundle.decode())
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname=f"{SVC}.{NS}.svc"
        )
        try:
            writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert (await read_answer(reader)).status == 200
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            serials.append(x509.load_der_x509_certificate(der).serial_number)
        finally:
            writer.close()

    async def client_loop() -> None:
        while not done.is_set():
            try:
                await call()
            except Exception as e:
                failures.append(e)
            await asyncio.sleep(0.005)  # the traffic's pace: a call about every 5 ms

    async def kubelet_sync() -> None:
        """The mounted Secret changes some time after the API write (a lag the clients
        call through); then wait until a call was served the new certificate."""
        await asyncio.sleep(0.3)  # the kubelet's lag, part of the scenario
        cert, key = _files(await cluster.secret())
        volume.rotate(cert, key)
        serial = x509.load_pem_x509_certificate(cert).serial_number
        await until(lambda: serial in serials, 5, "a call served the new certificate")

    async def calls(n: int, at_least: int = 0) -> None:
        """Wait until ``n`` more calls than now have succeeded, ``at_least`` in all."""
        target = max(len(serials) + n, at_least)
        await until(lambda: len(serials) >= target, 10, f"{n} more calls")

    for _ in range(200):  # until the server listens
        try:
            await call()
            break
        except OSError:
            await asyncio.sleep(0.025)
    clients = [asyncio.create_task(client_loop()) for _ in range(3)]
    try:
        await calls(3)  # traffic with the first pair
        # 1. the serving certificate is within its renewal window: a new one, same CA
        renewing = CertSettings(SVC, NS, days=100, ca_days=200, renew_before_days=95)
        renewed = await cluster.run(renewing)
        assert renewed.renewal.actions == ("renewed the serving certificate",)
        assert renewed.webhooks_patched == 0
        await kubelet_sync()
        # 2. the CA would not outlive a new certificate and its window: a new CA, both trusted
        rotating = CertSettings(SVC, NS, days=120, ca_days=1000, renew_before_days=81)
        rotated = await cluster.run(rotating)
        assert rotated.renewal.actions[0].startswith("rotated the CA")
        assert rotated.webhooks_patched == 2
        assert [len(parse_bundle(b)) for b in await cluster.bundles()] == [2, 2]
        await kubelet_sync()
        again = await cluster.run(rotating)  # nothing due; the old CA is kept for the grace
        assert again.renewal.actions == () and again.webhooks_patched == 0
        # 3. after the grace, the old CA is no longer used: it leaves the bundle
        later = (
            datetime.datetime.now(datetime.UTC) + PROPAGATION_GRACE + datetime.timedelta(minutes=1)
        )
        dropped = await cluster.run(rotating, now=later)
        assert dropped.renewal.actions[0].startswith("dropped the old CA")
        assert [len(parse_bundle(b)) for b in await cluster.bundles()] == [1, 1]
        # A call in flight per client may have read the bundle before the drop: the
        # fourth to succeed from now read the one-CA bundle. (And the traffic the count
        # below asks for: the lags above are shorter than a loaded machine's 50 calls.)
        await calls(4, at_least=51)
    finally:
        done.set()
        await asyncio.gather(*clients)
        stop.set()
        await task
    assert failures == []
    assert len(serials) > 50
    distinct = list(dict.fromkeys(serials))
    assert len(distinct) == 3  # created, renewed, from the new CA
    assert serials[-1] == distinct[-1]
    assert 2 in bundle_sizes and bundle_sizes[-1] == 1


async def test_the_command_line_renews_through_a_kubeconfig(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpu_intent.cli import main

    argv = ["certs", "--secret", SECRET, "--namespace", NS, "--service", SVC,
            "--webhook-configuration", MWC_NAME, "--kubeconfig", str(cluster.kubeconfig)]  # fmt: skip
    started = time.monotonic()
    assert await asyncio.to_thread(main, argv) == 0
    assert await asyncio.to_thread(main, argv) == 0
    assert time.monotonic() - started < 30
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert out[0].startswith("created a CA; created a serving certificate; created Secret")
    assert "nothing due" in out[1]
