"""``python -m gpu_intent``: the same as the ``gpu-intent`` command."""

from gpu_intent.cli import main

raise SystemExit(main())
