"""The comparison servers `bench.webhook` runs, one process each, over the same TLS files.

``python -m bench.webhook_servers null --port P --cert C --key K``: a null aiohttp
handler that reads the body, parses it and echoes an allowed response for its uid (the
least any AdmissionReview webhook in aiohttp must do).

``python -m bench.webhook_servers kopf ...``: kopf's admission webhook server
(``kopf.WebhookServer``) calling kopf's own admission engine
(``kopf._core.engines.admission.serve_admission_request``, what ``kopf.run`` wires up)
with one ``@kopf.on.mutate`` handler that does gpu-intent's mutation: the same scope,
the same `infer_intent`, the same annotations. No cluster is needed: the operator's
other tasks (watching, peering, posting events) are not started, which only helps kopf.
gpu-intent's own server is the real ``gpu-intent webhook`` command.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import ssl
from typing import Any

from aiohttp import web


def _context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


async def null_server(port: int, cert: str, key: str) -> None:
    """aiohttp over TLS: read, parse, answer ``allowed: true`` for the request's uid."""

    async def mutate(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        uid = body["request"]["uid"]
        return web.json_response(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": True},
            }
        )

    app = web.Application(client_max_size=7 * 1024 * 1024)
    app.router.add_post("/mutate", mutate)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=_context(cert, key)).start()
    await asyncio.Event().wait()


async def kopf_server(port: int, cert: str, key: str) -> None:
    """kopf's webhook server and admission engine with gpu-intent's mutation."""
    import kopf
    from kopf._cogs.structs import ephemera, references
    from kopf._core.engines import admission, indexing
    from kopf._core.reactor import inventory

    from intent.contract import ANNOTATION_VERSION, IntentError
    from intent.inference import infer_intent
    from webhook.scope import Scope

    scope = Scope.for_release("gpu-intent-system")
    registry = kopf.OperatorRegistry()

    @kopf.on.mutate("v1", "pods", id="mutate", operations=["CREATE"], registry=registry)
    def annotate(
        body: Any, patch: Any, warnings: list[str], namespace: str | None, **_: Any
    ) -> None:
        pod = body._src if hasattr(body, "_src") else dict(body)
        if scope.skip_reason({"namespace": namespace}, pod) is not None:
            return
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if ANNOTATION_VERSION in annotations:
            return
        try:
            intent = infer_intent(pod)
        except IntentError as e:
            warnings.append(f"gpu-intent: cannot infer GPU intent: {e}")
            return
        if intent is not None:
            patch.setdefault("metadata", {}).setdefault("annotations", {}).update(
                intent.to_annotations()
            )

    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    insights = references.Insights()
    insights.webhook_resources.add(
        references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
    )
    webhookfn = functools.partial(
        admission.serve_admission_request,
        settings=settings,
        registry=registry,
        insights=insights,
        memories=inventory.ResourceMemories(),
        memobase=ephemera.AnyMemo(ephemera.Memo()),
        indices=indexing.OperatorIndexers().indices,
    )
    server = kopf.WebhookServer(addr="127.0.0.1", port=port, certfile=cert, pkeyfile=key)
    async for _ in server(webhookfn):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=("null", "kopf"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    run = null_server if args.kind == "null" else kopf_server
    asyncio.run(run(args.port, args.cert, args.key))


if __name__ == "__main__":
    main()
