# The README's two commands: `make run` (main job on embedded defaults) and `make test`.
# Each creates .venv if missing and installs the project from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
MATRIX ?= gen:sbm?n=20000&blocks=200&p_in=0.02&p_out=0.00005&seed=1
WHEELHOUSE ?= .whl

.PHONY: run test test-gpu serve wheelhouse gpu-check compile-check clean

$(STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

run: $(STAMP)
	PREFECT_SERVER_ANALYTICS_ENABLED=false $(PY) flows/spmm.py --matrix '$(MATRIX)' --reorder auto

test: $(STAMP)
	$(PY) -m pytest -q -m "not gpu and not multi_gpu"

compile-check: $(STAMP)
	$(PY) -m kernels.compile_check

test-gpu: $(STAMP)
	$(PY) -m pytest -q -m "gpu or multi_gpu"

# A real Prefect server, a process work pool and worker, and the catalog deployment on its cron schedule.
serve: $(STAMP)
	bash scripts/serve.sh

# Offline wheelhouse for air-gapped GPU machines (Python 3.12, manylinux x86_64). Needs a networked machine.
wheelhouse:
	bash scripts/wheelhouse.sh $(WHEELHOUSE)

# On a bare GPU machine: install from the wheelhouse, run the gpu tests and a short benchmark, print a table last.
gpu-check:
	bash scripts/gpu_check.sh $(WHEELHOUSE)

clean:
	rm -rf $(VENV) build *.egg-info
