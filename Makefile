# Setup is the same for every target: a local virtual environment with the pinned CPU torch.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.statetrack-installed

.PHONY: test test-slow test-fuzz test-cuda demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# Pin torch before anything else: an unpinned torch pulls gigabytes of CUDA wheels.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

test-cuda: $(STAMP)
	$(PY) -m pytest -q -m cuda tests/test_cuda.py

test-fuzz: $(STAMP)
	$(PY) -m pytest -q -m fuzz tests/test_fuzz.py

demo: $(STAMP)
	$(VENV)/bin/statetrack run demo

clean:
	rm -rf $(VENV) results build *.egg-info src/*.egg-info
