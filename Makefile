# make setup: create .venv with kernelpilot and everything its tests use (NVIDIA's compilers from PyPI included),
#             and install the system compilers for AMD code (apt-get, as root on Debian or Ubuntu).
# make demo: make setup, then analyze the example kernels for sm_90 and gfx942 (skipping, and naming, any
#            example whose compiler could not be installed).
# make test: the default suite (kernelpilot itself). make test-all: every suite, as CI runs it.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The CPU build of this release lies on the project's machines; pinning it keeps pip from pulling a CUDA build.
TORCH_VERSION ?= 2.13.0

.PHONY: setup compilers demo test test-all bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP) compilers

compilers:
	@bash scripts/install-compilers.sh

demo: setup
	@bash scripts/demo.sh $(BIN)/kpilot

# CPU tests run on every core (pytest-xdist); GPU tests one at a time, since they time kernels on the one GPU
# (skipped where there is none). test-all adds the case study (marker example) and the compiled-kernel checks
# repeated on further archs (marker golden).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not example and not golden and not gpu"
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		$(BIN)/python -m pytest -q -m "gpu and not example and not golden"; \
	else echo "No NVIDIA GPU here (nvidia-smi not found): the GPU tests (marker gpu) were not run."; fi

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not gpu"
	$(BIN)/python -m pytest -q -m gpu

bench: $(STAMP)
	$(BIN)/python benchmarks/isa_speed.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
