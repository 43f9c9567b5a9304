# Setup is the same for every target: a local virtual environment with the pinned CPU torch.
VENV ?= .venv
PY := $(VENV)/bin/python
CORE := $(VENV)/.statetrack-core
STAMP := $(VENV)/.statetrack-installed

.PHONY: test lint test-slow test-fuzz test-cuda demo clean

# the package alone: what `make demo` needs
$(CORE): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# Pin torch before anything else: an unpinned torch pulls gigabytes of CUDA wheels.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e .
	touch $(CORE)

# the tests' extras on top: Ray, the trackers, the oracles, and the linters
$(STAMP): $(CORE)
	$(PY) -m pip install -q -e ".[dev,lint]"
	touch $(STAMP)

# lint and types first (seconds), then the default suite, spread over the cores (at most 4
# processes: several tests start two workers of their own), the 25 slowest printed
test: lint
	$(PY) -m pytest -q -n auto --maxprocesses 4 --durations=25

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src
	$(VENV)/bin/mypy

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

test-cuda: $(STAMP)
	$(PY) -m pytest -q -m cuda tests/test_cuda.py tests/ops/test_fla_kernels.py

test-fuzz: $(STAMP)
	$(PY) -m pytest -q -m fuzz tests/test_fuzz.py

demo: $(CORE)
	$(VENV)/bin/statetrack run demo

clean:
	rm -rf $(VENV) results build *.egg-info src/*.egg-info
