"""gpu-intent's foundation: what every part of the product shares.

The intent contract (`intent.contract`: the ``gpu-intent.io/`` annotations and the
`Intent` value), how a pod's GPU request is read (`intent.inference`, with
`intent.demand`, `intent.gpu_model` and `intent.dra` for ResourceClaims), the GPU catalog
(`intent.catalog`), Kubernetes quantities (`intent.quantity`), bounded text for messages
(`intent.text`), logging (`intent.logs`) and process settings (`intent.runtime`).

It imports none of the components: ``webhook``, ``controller`` and ``certs`` build on it
and never on each other, the simulated cluster (``sim``) builds on it alone, and the
composition root (``gpu_intent``: the command, the demo, ``explain``) is the one place that
puts them together. ``lint-imports`` (``[tool.importlinter]`` in pyproject.toml) keeps it so.
"""
