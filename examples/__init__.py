"""The demo's manifests (``*.yaml``), installed as the package ``gpu_intent.examples`` so
that ``gpu-intent demo`` finds them in an editable install and from a wheel alike."""
