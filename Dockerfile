# gpu-intent: one image for the webhook, the controller and the certs Job (the chart picks
# the subcommand). Build: docker build -t ghcr.io/gpu-intent/gpu-intent:0.1.0 .

# Build stage: install gpu-intent and its dependencies (all wheels: no compiler) into a venv.
FROM python:3.11.14-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/gpu-intent
WORKDIR /src
COPY pyproject.toml README.md ./
COPY intent ./intent
COPY gpu_intent ./gpu_intent
COPY webhook ./webhook
COPY controller ./controller
COPY certs ./certs
COPY sim ./sim
COPY examples ./examples
# Bytecode for both optimization levels: the final stage runs with PYTHONOPTIMIZE=2.
RUN /opt/gpu-intent/bin/pip install --no-compile . \
    && /opt/gpu-intent/bin/python -m compileall -q -o 0 -o 2 /opt/gpu-intent/lib \
    && /opt/gpu-intent/bin/pip uninstall --yes pip

# Final stage: the same base (the venv's interpreter path must match), the venv and nothing
# else: no pip, no build tools, no sources; a fixed non-root user the chart's
# securityContext names (65532), a root filesystem that can stay read-only.
# PYTHONOPTIMIZE=2 loads no docstrings: kubernetes_asyncio's generated API and model
# modules carry about 13 MiB of them, a tenth of the controller's memory
# (bench.controller_rss measures the controller with and without). Nothing in gpu-intent
# reads a docstring or relies on an assert at run time.
FROM python:3.11.14-slim-bookworm
ENV PATH=/opt/gpu-intent/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONOPTIMIZE=2 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/gpu-intent /opt/gpu-intent
RUN groupadd --gid 65532 gpu-intent \
    && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin gpu-intent
USER 65532:65532
ENTRYPOINT ["gpu-intent"]
CMD ["--help"]
