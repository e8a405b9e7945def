"""Makes the SQuAD golden files: google-research/bert's own `write_predictions` on fixed logits.

Run from the repo root (needs only absl and six; no TensorFlow, no network):

    .venv/bin/python tests/make_google_squad_golden.py [path/to/google-research+bert/repo]

It reads run_squad.py, tokenization.py, modeling.py and optimization.py of google-research/bert
at commit GOOGLE_COMMIT from the bare git directory (default /work/.mirror/google-research+bert/
repo, the `fetch` of github:google-research/bert), imports them from a temporary folder with a
stand-in `tensorflow` module (absl flags for tf.flags, `open` for tf.gfile, logging for
tf.logging, plain classes for what optimization.py subclasses at import), and writes
tests/data/google_squad/:

  vocab.txt             a small uncased WordPiece vocab covering the contexts (long words as
                        two pieces, so answers start and end inside words)
  squad.json            the questions (SQuAD v2.0 JSON: some is_impossible), in SETTINGS' windows
  features.json         Google's `convert_examples_to_features` windows of them: unique_id,
                        example_index, doc_span_index, tokens, input_ids, token_to_orig_map,
                        token_is_max_context
  logits.json           fixed start/end logits per feature (seeded normal draws, float32 values;
                        [CLS] raised on every window of NULL_WINS' questions)
  settings.json         the windowing and decoding settings, and GOOGLE_COMMIT
  v1/predictions.json, v1/nbest_predictions.json                     write_predictions, v1.1
  v2/predictions.json, v2/nbest_predictions.json, v2/null_odds.json  the same with
                        --version_2_with_negative

tests/test_google_squad.py windows squad.json with tfbert, checks its windows give Google's ids,
decodes the same logits and compares with these files. Rerun only when the inputs change.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "google_squad")
GOOGLE_REPO = "/work/.mirror/google-research+bert/repo"
GOOGLE_COMMIT = "eedf5716ce1268e56f0a50264a88cafad334ac61"
SETTINGS = {"max_seq_length": 40, "doc_stride": 12, "max_query_length": 10, "n_best_size": 6,
            "max_answer_length": 8, "do_lower_case": True, "null_score_diff_threshold": 0.0,
            "google_commit": GOOGLE_COMMIT}
NULL_WINS = ("q3", "q5", "q6")  # questions whose every window gets a high [CLS] score

PARAGRAPHS = [
    ("Photosynthesis in green plants turns sunlight, water and carbon dioxide into sugar and "
     "oxygen. The Café Müller in Vienna served its first coffee in 1887, and Smith's bakery "
     "opened next door during the 1890s.",
     [("q1", "What does photosynthesis turn sunlight into?", "sugar and oxygen", False),
      ("q2", "When did the café serve its first coffee?", "1887", False),
      ("q3", "Who invented the telephone?", None, True)]),
    ("The Amazon river carries more water than any other river. Its basin covers parts of "
     "Brazil, Peru and Colombia (among others), and the rainforest around it holds millions of "
     "species of insects, plants and birds.",
     [("q4", "Which countries does the basin cover?", "Brazil, Peru and Colombia", False),
      ("q5", "What does the rainforest hold?", "millions of species", False),
      ("q6", "How deep is the ocean?", None, True)]),
]


def _squad_json() -> dict:
    paragraphs = []
    for context, qas in PARAGRAPHS:
        entries = []
        for qid, question, answer, impossible in qas:
            answers = [] if impossible else [{"text": answer,
                                              "answer_start": context.index(answer)}]
            entries.append({"id": qid, "question": question, "answers": answers,
                            "is_impossible": impossible})
        paragraphs.append({"context": context, "qas": entries})
    return {"version": "v2.0", "data": [{"title": "golden", "paragraphs": paragraphs}]}


def _git_show(repo: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{GOOGLE_COMMIT}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def _stand_in_tensorflow() -> types.ModuleType:
    """What google-research/bert's modules touch at import and in write_predictions."""
    from absl import flags

    log = logging.getLogger("google_bert")
    tf = types.ModuleType("tensorflow")
    tf.flags = flags
    tf.gfile = types.SimpleNamespace(GFile=open, Open=open)
    tf.logging = types.SimpleNamespace(info=log.info, warning=log.warning, error=log.error)
    tf.train = types.SimpleNamespace(Optimizer=object, SessionRunHook=object)
    tf.contrib = types.SimpleNamespace()
    tf.estimator = types.SimpleNamespace(SessionRunHook=object)
    return tf


def _google_modules(repo: str, folder: str) -> types.ModuleType:
    for name in ("run_squad", "tokenization", "modeling", "optimization"):
        with open(os.path.join(folder, f"{name}.py"), "w", encoding="utf-8") as f:
            f.write(_git_show(repo, f"{name}.py"))
    sys.modules["tensorflow"] = _stand_in_tensorflow()
    sys.path.insert(0, folder)
    run_squad = importlib.import_module("run_squad")
    run_squad.FLAGS(["make_google_squad_golden"])
    return run_squad


def _vocab(texts: list[str], tokenization: types.ModuleType) -> list[str]:
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    words = sorted({w for t in texts for w in basic.tokenize(t)})
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    for w in words:  # words of 8+ characters as two pieces: answers may cut inside them
        pieces = [w[:5], "##" + w[5:]] if len(w) >= 8 else [w]
        tokens += [p for p in pieces if p not in tokens]
    return tokens


def main(repo: str = GOOGLE_REPO) -> None:
    os.makedirs(os.path.join(OUT, "v1"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "v2"), exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        google = _google_modules(repo, folder)
        squad = _squad_json()
        squad_path = os.path.join(OUT, "squad.json")
        with open(squad_path, "w", encoding="utf-8") as f:
            json.dump(squad, f, ensure_ascii=False, indent=1)
        texts = [p["context"] for p in squad["data"][0]["paragraphs"]] + [
            q["question"] for p in squad["data"][0]["paragraphs"] for q in p["qas"]]
        vocab_path = os.path.join(OUT, "vocab.txt")
        with open(vocab_path, "w", encoding="utf-8") as f:
            f.write("\n".join(_vocab(texts, google.tokenization)) + "\n")

        examples = google.read_squad_examples(squad_path, is_training=False)
        tokenizer = google.tokenization.FullTokenizer(vocab_path, do_lower_case=True)
        features = []
        google.convert_examples_to_features(
            examples, tokenizer, SETTINGS["max_seq_length"], SETTINGS["doc_stride"],
            SETTINGS["max_query_length"], is_training=False, output_fn=features.append)

        rng = np.random.default_rng(20181011)
        results, logits = [], []
        for feature in features:
            start, end = (rng.normal(0.0, 3.0, SETTINGS["max_seq_length"]).astype(np.float32)
                          for _ in range(2))
            if examples[feature.example_index].qas_id in NULL_WINS:  # a confident [CLS]
                start[0] += 9.0
                end[0] += 9.0
            start, end = [float(x) for x in start], [float(x) for x in end]
            results.append(google.RawResult(unique_id=feature.unique_id, start_logits=start,
                                            end_logits=end))
            logits.append({"unique_id": feature.unique_id, "start_logits": start,
                           "end_logits": end})
        for version, negative in (("v1", False), ("v2", True)):
            google.FLAGS.version_2_with_negative = negative
            google.FLAGS.null_score_diff_threshold = SETTINGS["null_score_diff_threshold"]
            where = os.path.join(OUT, version)
            google.write_predictions(
                examples, features, results, SETTINGS["n_best_size"],
                SETTINGS["max_answer_length"], SETTINGS["do_lower_case"],
                os.path.join(where, "predictions.json"),
                os.path.join(where, "nbest_predictions.json"),
                os.path.join(where, "null_odds.json"))

    payload = {
        "features.json": [{"unique_id": f.unique_id, "example_index": f.example_index,
                           "doc_span_index": f.doc_span_index, "tokens": f.tokens,
                           "input_ids": f.input_ids,
                           "token_to_orig_map": {str(k): v for k, v in
                                                 f.token_to_orig_map.items()},
                           "token_is_max_context": {str(k): v for k, v in
                                                    f.token_is_max_context.items()}}
                          for f in features],
        "logits.json": logits,
        "settings.json": SETTINGS,
    }
    for name, value in payload.items():
        with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
            f.write(json.dumps(value, ensure_ascii=False, indent=1) + "\n")
    print(f"{len(examples)} questions, {len(features)} windows -> {OUT}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
