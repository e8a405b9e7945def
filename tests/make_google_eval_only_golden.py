"""Makes the golden outputs of google-research/bert's evaluation and prediction runs from its
fine-tuned checkpoints (the tests/data/google_heads fixtures), with its own code as the oracle.

Run from the repo root (needs TensorFlow, absl and the google-research/bert mirror, a bare git
directory fetched with the `fetch` tool, github:google-research/bert):

    .venv/bin/python tests/make_google_eval_only_golden.py [BERT_GIT_DIR]

run_classifier.py, run_squad.py, modeling.py, tokenization.py and optimization.py are read from
commit COMMIT (`git show`) into a temporary folder and imported under the compat.v1 shim of
tests/make_google_head_golden.py (its `tf.layers.dense` and `tf.contrib.layers.layer_norm`),
each script with flags of its own (both define --vocab_file, ...). What their `main` does for
--do_eval / --do_predict runs as there, minus the TPUEstimator (TF2 has none): the features come
from their own processors and converters, the model from their `create_model` with
is_training=False, the weights from the checkpoint through `get_assignment_map_from_checkpoint`
and `tf.train.init_from_checkpoint`, and

  classifier  MNLI (tests/data/google_classifier/MNLI), vocab and checkpoint of
              google_heads/classifier, max_seq_length 64: the dev set through run_classifier's
              metric_fn (tf.metrics.accuracy and tf.metrics.mean of per_example_loss; the
              Estimator's `loss` is the mean of the batch losses, one batch of 8 here), the
              test set's `probabilities`;
  squad       tests/data/google_squad/squad.json with google_heads/squad's vocab and checkpoint,
              SQUAD settings below: every window's start/end logits through run_squad's
              `write_predictions`, v1.1 and v2.0.

It writes tests/data/google_eval_only/
  golden.json                     the settings, the classifier's eval_accuracy / eval_loss /
                                  loss, its dev and test probabilities, and GR's commit
  mnli/eval_results.txt           as run_classifier writes them (without global_step: the
  mnli/test_results.tsv           fixture has none; a GR training output's is its step)
  squad_v1/predictions.json, squad_v1/nbest_predictions.json
  squad_v2/predictions.json, squad_v2/nbest_predictions.json, squad_v2/null_odds.json

tests/test_google_eval_only.py runs tfbert's run_classifier.py / run_squad.py without
--do_train from the same checkpoints and compares. Rerun only when the inputs change.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_google_head_golden as heads  # noqa: E402  (its shim and git reader)

DATA = os.path.join(HERE, "data")
OUT = os.path.join(DATA, "google_eval_only")
MNLI = os.path.join(DATA, "google_classifier", "MNLI")
SQUAD_FILE = os.path.join(DATA, "google_squad", "squad.json")
CLASSIFIER = os.path.join(DATA, "google_heads", "classifier")
SQUAD_MODEL = os.path.join(DATA, "google_heads", "squad")
MAX_SEQ_LENGTH = 64
SQUAD = {"max_seq_length": 64, "doc_stride": 16, "max_query_length": 16, "n_best_size": 20,
         "max_answer_length": 30, "do_lower_case": True, "null_score_diff_threshold": 0.0}
EVAL_BATCH_SIZE = 8  # run_classifier's default


def _flags_module(flag_values):
    """absl.flags with every DEFINE_* bound to `flag_values`: one script's own flags."""
    from absl import flags

    module = types.SimpleNamespace(FLAGS=flag_values)
    for name in dir(flags):
        if name.startswith("DEFINE") or name.startswith("mark_flag"):
            setattr(module, name, functools.partial(getattr(flags, name),
                                                    flag_values=flag_values))
    return module


def _import(git_dir: str, folder: str, script: str):
    """`script` of google-research/bert imported under the compat.v1 shim, with its flags."""
    import tensorflow as tf
    from absl import flags

    shim = heads._tf_shim(tf.compat.v1)
    shim.flags = _flags_module(flags.FlagValues())
    shim.logging = types.SimpleNamespace(info=logging.info, warning=logging.warning,
                                         error=logging.error, set_verbosity=lambda _: None,
                                         INFO=logging.INFO)
    for name in (script, "modeling", "tokenization", "optimization"):
        with open(os.path.join(folder, f"{name}.py"), "w", encoding="utf-8") as f:
            f.write(heads._blob(git_dir, f"{name}.py"))
    real = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = shim
    try:
        module = importlib.import_module(script)
    finally:
        sys.modules["tensorflow"] = real
    module.FLAGS([script])
    return module


def _restore(module, v1, checkpoint: str) -> None:
    """run_classifier's / run_squad's model_fn: the variables from `init_checkpoint`."""
    assignment_map, _ = module.modeling.get_assignment_map_from_checkpoint(
        v1.trainable_variables(), checkpoint)
    v1.train.init_from_checkpoint(checkpoint, assignment_map)


def _classifier(module) -> dict:
    import tensorflow as tf

    v1 = tf.compat.v1
    processor = module.MnliProcessor()
    labels = processor.get_labels()
    tokenizer = module.tokenization.FullTokenizer(os.path.join(CLASSIFIER, "vocab.txt"), True)
    config = module.modeling.BertConfig.from_json_file(os.path.join(CLASSIFIER,
                                                                    "bert_config.json"))
    out = {"labels": labels, "max_seq_length": MAX_SEQ_LENGTH}
    for split, examples in (("dev", processor.get_dev_examples(MNLI)),
                            ("test", processor.get_test_examples(MNLI))):
        features = [module.convert_single_example(i, e, labels, MAX_SEQ_LENGTH, tokenizer)
                    for i, e in enumerate(examples)]
        graph = tf.Graph()
        with graph.as_default():
            batch = {k: v1.constant([getattr(f, k) for f in features], tf.int32)
                     for k in ("input_ids", "input_mask", "segment_ids", "label_id")}
            _, per_example_loss, logits, probabilities = module.create_model(
                config, False, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                batch["label_id"], len(labels), False)
            _restore(module, v1, os.path.join(CLASSIFIER, "bert_model.ckpt"))
            # run_classifier's metric_fn
            predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
            weights = v1.ones([len(features)], tf.float32)
            accuracy = v1.metrics.accuracy(labels=batch["label_id"], predictions=predictions,
                                           weights=weights)
            loss = v1.metrics.mean(values=per_example_loss, weights=weights)
            total_loss = tf.reduce_mean(per_example_loss)
            with v1.Session(graph=graph) as session:
                session.run([v1.global_variables_initializer(),
                             v1.local_variables_initializer()])
                session.run([accuracy[1], loss[1]])
                values = session.run({"eval_accuracy": accuracy[0], "eval_loss": loss[0],
                                      "loss": total_loss, "probabilities": probabilities})
        out[f"{split}_probabilities"] = values["probabilities"].tolist()
        out[f"{split}_count"] = len(features)
        if split == "dev":
            assert len(features) <= EVAL_BATCH_SIZE  # one batch: `loss` is its mean
            out.update({k: float(values[k]) for k in ("eval_accuracy", "eval_loss", "loss")})
            os.makedirs(os.path.join(OUT, "mnli"), exist_ok=True)
            with open(os.path.join(OUT, "mnli", "eval_results.txt"), "w") as f:
                for key in sorted(("eval_accuracy", "eval_loss", "loss")):  # run_classifier's
                    f.write(f"{key} = {values[key]!s}\n")
        else:
            with open(os.path.join(OUT, "mnli", "test_results.tsv"), "w") as f:
                for row in values["probabilities"]:  # run_classifier's do_predict
                    f.write("\t".join(str(p) for p in row) + "\n")
    return out


def _squad(module) -> None:
    import tensorflow as tf

    v1 = tf.compat.v1
    tokenizer = module.tokenization.FullTokenizer(os.path.join(SQUAD_MODEL, "vocab.txt"), True)
    config = module.modeling.BertConfig.from_json_file(os.path.join(SQUAD_MODEL,
                                                                    "bert_config.json"))
    examples = module.read_squad_examples(SQUAD_FILE, is_training=False)
    features = []
    module.convert_examples_to_features(
        examples, tokenizer, SQUAD["max_seq_length"], SQUAD["doc_stride"],
        SQUAD["max_query_length"], is_training=False, output_fn=features.append)
    graph = tf.Graph()
    with graph.as_default():
        batch = {k: v1.constant([getattr(f, k) for f in features], tf.int32)
                 for k in ("input_ids", "input_mask", "segment_ids")}
        start, end = module.create_model(config, False, batch["input_ids"], batch["input_mask"],
                                         batch["segment_ids"], False)
        _restore(module, v1, os.path.join(SQUAD_MODEL, "bert_model.ckpt"))
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            starts, ends = session.run([start, end])
    results = [module.RawResult(unique_id=f.unique_id, start_logits=[float(x) for x in s],
                                end_logits=[float(x) for x in e])
               for f, s, e in zip(features, starts, ends, strict=True)]
    for version, negative in (("squad_v1", False), ("squad_v2", True)):
        module.FLAGS.version_2_with_negative = negative
        module.FLAGS.null_score_diff_threshold = SQUAD["null_score_diff_threshold"]
        where = os.path.join(OUT, version)
        os.makedirs(where, exist_ok=True)
        module.write_predictions(examples, features, results, SQUAD["n_best_size"],
                                 SQUAD["max_answer_length"], SQUAD["do_lower_case"],
                                 os.path.join(where, "predictions.json"),
                                 os.path.join(where, "nbest_predictions.json"),
                                 os.path.join(where, "null_odds.json"))
    print(f"squad: {len(examples)} questions, {len(features)} windows")


def main() -> None:
    git_dir = sys.argv[1] if len(sys.argv) > 1 else heads.BERT_GIT
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        sys.path.insert(0, folder)
        golden = _classifier(_import(git_dir, folder, "run_classifier"))
        _squad(_import(git_dir, folder, "run_squad"))
    golden.update(squad=SQUAD, commit=heads.COMMIT, versions=f"tensorflow {tf.__version__}")
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(golden, indent=1) + "\n")
    print(f"classifier: eval_accuracy {golden['eval_accuracy']}, eval_loss "
          f"{golden['eval_loss']}")


if __name__ == "__main__":
    main()
