# make demo: create .venv, install kernelpilot, analyze the example kernels for sm_90 and gfx942.
# make test: install what the tests need into .venv and run them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The CPU build of this release lies on the project's machines; pinning it keeps pip from pulling a CUDA build.
TORCH_VERSION ?= 2.13.0

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	@echo "== Triton kernel for an NVIDIA H100/H200 (sm_90) =="
	$(BIN)/kpilot isa analyze examples/kernels/softmax_triton.py:softmax_kernel --arch sm_90
	@echo
	@echo "== The same Triton kernel for an AMD MI300X (gfx942) =="
	$(BIN)/kpilot isa analyze examples/kernels/softmax_triton.py:softmax_kernel --arch gfx942
	@echo
	@echo "== HIP wave argmax: shuffles through LDS (ds_bpermute) vs DPP =="
	$(BIN)/kpilot isa analyze examples/kernels/wave_argmax_bpermute.hip --arch gfx942
	@echo
	$(BIN)/kpilot isa diff examples/kernels/wave_argmax_bpermute.hip examples/kernels/wave_argmax_dpp.hip --arch gfx942

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/isa_speed.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
