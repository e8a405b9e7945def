"""The whole tfbert pipeline on built-in data, from the shipped Chinese BERT, on 2 CPU cores.

1. Continued pretraining (run_pretraining.py's job as users run it): `tfbert-chinese`, the
   6-layer Chinese BERT that ships with tfbert, trained a few minutes more (masked LM + next
   sentence) on the unlabelled text of the `sentiment` task's training reviews, written as
   pretraining records first (create_pretraining_data.py's job). Task-adaptive pretraining:
   Gururangan et al., 2020.
2. Fine-tune on 1,000 labelled reviews: from tfbert-chinese, from tfbert-chinese after the
   continued pretraining, and the same shape from random init, with the same settings and seed
   (run_classifier.py's defaults otherwise); a character n-gram TF-IDF + logistic regression
   baseline learns from the same 1,000 reviews. All are scored on the clean test split (no
   test review, nor a near-copy of one, is in any training text: tfbert.data.splits).
3. Export the fine-tuned continued-pretraining model as a TF Serving SavedModel (raw text in)
   and as TFLite files, and check both against the Keras model on the test reviews (agreement,
   largest probability difference) and time them at batch 1.
4. Classify held-out test reviews (the first ones of the split, with their gold labels) through
   the SavedModel and the TFLite model, then print the table.

    make demo            # or: python demo.py [--output_dir=output/demo]

One seed: the table shows one run of each. The means over 3 seeds, on more setups, are in
docs/pretraining.md (`python -m bench.quality --pretrained=tfbert-chinese`). Every stage reuses
what an earlier run left (the continued pretraining, the fine-tuned models, the export), so a
second `make demo` takes about a minute.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import statistics
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# 1,000 labelled reviews keep the three fine-tuning runs within a few minutes; the quality
# table (docs/pretraining.md) has all training reviews and NER, baselines beside them.
NUM_TRAIN_EXAMPLES = 1000
SHOWN_EXAMPLES = 8
MODEL = "tfbert-chinese"
# Continued pretraining: 400 steps of 32 sequences of 64 tokens (the fine-tuning length) at a
# fifth of tfbert-chinese's peak rate, about 2 minutes on 2 AMX cores.
CONTINUED = dict(max_seq_length=64, max_predictions_per_seq=10, num_train_steps=400,
                 num_warmup_steps=40, learning_rate=1e-4, save_checkpoints_steps=200,
                 eval_batch_size=16)


def stage(title: str) -> float:
    logging.info("\n=== %s", title)
    return time.perf_counter()


def finetune(name: str, output_dir: str, start: dict[str, str], args: argparse.Namespace
             ) -> dict[str, Any]:
    """One sentiment fine-tuning run; an earlier run in output_dir is reused only when it ran
    with exactly these settings (its tfbert_run.json), and replaced otherwise."""
    import dataclasses

    from tfbert.tasks.classification import ClassificationConfig, run_classification

    config = ClassificationConfig(
        task_name="sentiment", output_dir=output_dir, max_train_examples=NUM_TRAIN_EXAMPLES,
        max_seq_length=args.max_seq_length, num_train_epochs=args.num_train_epochs,
        learning_rate=args.learning_rate, train_batch_size=32, seed=42, verbose=2, **start)
    try:
        with open(os.path.join(output_dir, "tfbert_run.json"), encoding="utf-8") as f:
            ran = json.load(f)["config"]
        with open(os.path.join(output_dir, "results.json"), encoding="utf-8") as f:
            results = json.load(f)
    except (OSError, KeyError, ValueError):
        return run_classification(config)
    wanted = json.loads(json.dumps(dataclasses.asdict(config)))
    if all(ran.get(k) == v for k, v in wanted.items()):
        logging.info("%s: reusing %s (same settings; delete it to fine-tune again)", name,
                     output_dir)
        return results
    return run_classification(config)


def continue_pretraining(output_dir: str) -> dict[str, Any]:
    """Pretraining records of the sentiment task's training reviews (text only; 10% of them
    held out to score the masked LM), then run_pretraining from tfbert-chinese on them.

    The same as:
        python data_tools/create_pretraining_data.py --input_file=reviews.txt \\
            --output_file=reviews.tfrecord --vocab_file=VOCAB --max_seq_length=64
        python run_pretraining.py --init_checkpoint=tfbert-chinese \\
            --input_file=reviews.tfrecord --max_seq_length=64 --num_train_steps=400 ...
    """
    from tfbert.checkpoints import resolve_source
    from tfbert.data import corpora
    from tfbert.data.classification.builtin import builtin_examples
    from tfbert.pretraining_data import instance_files, instances
    from tfbert.training.pretrain import PretrainConfig, run_pretraining

    vocab_file = os.path.join(resolve_source(MODEL), "vocab.txt")
    data_dir = output_dir + "_data"
    files = {name: os.path.join(data_dir, f"{name}.tfrecord") for name in ("train", "eval")}
    if not all(os.path.exists(f) for f in files.values()):
        reviews = [e.text for e in builtin_examples("sentiment", "train")]
        held_out = {t for t in reviews if corpora.stable_split(t, 0.0, 0.1) == "test"}
        documents = {"train": [corpora.split_sentences(t) for t in reviews if t not in held_out],
                     "eval": [corpora.split_sentences(t) for t in reviews if t in held_out]}
        os.makedirs(data_dir, exist_ok=True)
        for name, path in files.items():
            instance_files.create_pretraining_data(
                path, vocab_file, documents=[d for d in documents[name] if d],
                options=instances.InstanceOptions(max_seq_length=CONTINUED["max_seq_length"],
                                                  dupe_factor=2 if name == "train" else 1),
                max_predictions_per_seq=CONTINUED["max_predictions_per_seq"], progress=False)
    return run_pretraining(PretrainConfig(
        init_checkpoint=MODEL, input_file=files["train"], eval_input_file=files["eval"],
        output_dir=output_dir, verbose=2, **CONTINUED))


def read_predictions(path: str) -> tuple[list[str], list[str], list[str], Any]:
    """test_predictions.tsv: texts, gold labels, the label names, probabilities [N, classes]."""
    import numpy as np

    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    columns = [c for c in rows[0] if c.startswith("p_")]
    return ([r["text"] for r in rows], [r["label"] for r in rows], [c[2:] for c in columns],
            np.array([[float(r[c]) for c in columns] for r in rows]))


def serving_probabilities(signature: Any, texts: list[str], batch: int = 64) -> Any:
    import numpy as np
    import tensorflow as tf

    return np.concatenate([signature(text=tf.constant(texts[i:i + batch]))["probabilities"]
                           .numpy() for i in range(0, len(texts), batch)])


def median_ms(call: Any, runs: int = 30) -> float:
    call()  # warm
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="output/demo")
    parser.add_argument("--export_dir", default="saved_models/sentiment/1")
    parser.add_argument("--num_train_epochs", type=float, default=4.0)
    parser.add_argument("--learning_rate", type=float, default=None,
                        help="every start's rate; default: run_classification's for each start "
                             "(tfbert.training.finetune.default_learning_rate)")
    parser.add_argument("--max_seq_length", type=int, default=64,
                        help="fine-tuning sequence length (the median review is 46 characters)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    began = time.perf_counter()

    from tfbert.devices import list_devices

    list_devices()  # once, before any TensorFlow work: no cuInit line on a machine without a GPU
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    from tfbert.checkpoints import read_metadata, resolve_source
    from tfbert.evaluation.baselines import tfidf_baseline
    from tfbert.export import export_model
    from tfbert.export.saved_model import ExportSpec
    from tfbert.export.tflite_eval import measure_agreement, run_text_tflite

    times: dict[str, float] = {}
    start = stage(f"1/4 continued pretraining of {MODEL} on the sentiment task's unlabelled "
                  "training reviews")
    continued_dir = os.path.join(args.output_dir, "continued_pretraining")
    pretrained = continue_pretraining(continued_dir)
    times["pretraining" if pretrained["examples_trained"] else "pretraining (reused)"] = \
        time.perf_counter() - start
    logging.info("continued pretraining: step %d, held-out masked-LM loss %.3f, accuracy "
                 "%.1f%%  (%.0f s)", pretrained["global_step"], pretrained["mlm_loss"],
                 100 * pretrained["masked_lm_accuracy"], time.perf_counter() - start)

    start = stage(f"2/4 fine-tuning on {NUM_TRAIN_EXAMPLES:,} labelled reviews: {MODEL}, "
                  f"{MODEL} + continued pretraining, random init, TF-IDF")
    checkpoint = os.path.join(continued_dir, "model")
    shipped = resolve_source(MODEL)
    runs = {
        MODEL: finetune(MODEL, os.path.join(args.output_dir, "tfbert_chinese"),
                        {"init_checkpoint": MODEL}, args),
        "continued": finetune("continued", os.path.join(args.output_dir, "continued"),
                              {"init_checkpoint": checkpoint}, args),
        "random init": finetune("random init", os.path.join(args.output_dir, "random_init"),
                                {"bert_config_file": os.path.join(shipped, "config.json"),
                                 "vocab_file": os.path.join(shipped, "vocab.txt")}, args),
    }
    tfidf = tfidf_baseline(max_train_examples=NUM_TRAIN_EXAMPLES)
    times["fine-tuning"] = time.perf_counter() - start
    for name, result in runs.items():
        logging.info("%-14s dev accuracy %.4f, test accuracy %.4f", name,
                     result["dev"]["accuracy"], result["test"]["accuracy"])
    logging.info("%-14s dev accuracy %.4f, test accuracy %.4f (char 1-%d-grams, C=%g)",
                 "TF-IDF", tfidf["dev"]["accuracy"], tfidf["test"]["accuracy"],
                 tfidf["config"]["ngram_range"][1], tfidf["config"]["C"])

    start = stage(f"3/4 exporting to {args.export_dir} (SavedModel) and TFLite")
    model_dir = os.path.join(args.output_dir, "continued", "model")
    # The demo replaces its own earlier export (a tfbert export; anything else there is refused).
    info = export_model(model_dir, args.export_dir, tflite=("float32", "int8"), overwrite=True)
    logging.info("TF Serving op check: %s", "ok" if info["serving_check"]["ok"] else "FAILED")
    texts, gold, label_names, keras_probs = read_predictions(
        os.path.join(args.output_dir, "continued", "test_predictions.tsv"))
    serving = tf.saved_model.load(args.export_dir).signatures["serving_default"]
    exported = {"SavedModel": serving_probabilities(serving, texts)}
    latency = {"SavedModel": median_ms(lambda: serving(text=tf.constant(texts[:1])))}
    agreement = None
    for _, entry in sorted(info.get("tflite", {}).items()):
        if entry["inputs"] == "text":
            label = f"TFLite {entry['quantization']}"
            exported[label] = run_text_tflite(entry["path"], texts)
            latency[label] = entry["latency_ms"]
            if agreement is None:  # the text model's tokenizer against the reference's
                agreement = measure_agreement(
                    os.path.join(model_dir, "vocab.txt"),
                    ExportSpec(task="encoder", seq_length=args.max_seq_length,
                               lower_case=read_metadata(model_dir)["lower_case"]),
                    texts, entry["path"])
    times["export"] = time.perf_counter() - start

    stage("4/4 held-out test reviews through the SavedModel and TFLite (gold label first)")
    tflite_float = exported.get("TFLite float32")
    for i in range(SHOWN_EXAMPLES):
        p = exported["SavedModel"][i]
        predicted = label_names[int(np.argmax(p))]
        mark = "ok   " if predicted == gold[i] else "WRONG"
        tflite_note = (f"  TFLite {label_names[int(np.argmax(tflite_float[i]))]}"
                       if tflite_float is not None else "")
        logging.info("  gold %-8s %s SavedModel %-8s p=%.2f%s  %s", gold[i], mark, predicted,
                     float(p.max()), tflite_note, texts[i][:40])

    logging.info("\n%s", table(pretrained, runs, tfidf, keras_probs, gold, label_names,
                               exported, latency, times, time.perf_counter() - began))
    if agreement is not None:
        logging.info("TFLite's text model gives the reference tokenizer's ids for %.1f%% of the "
                     "test reviews (where it differs: mixed-case words such as \"5200mA\", which "
                     "it does not lower-case; tfbert/export/tflite_text.py)",
                     100 * agreement["equal_texts"])
    logging.info("\ncontinued-pretraining model %s, fine-tuned model %s, SavedModel %s",
                 checkpoint, model_dir, args.export_dir)


def table(pretrained: dict, runs: dict, tfidf: dict, keras_probs: Any, gold: list[str],
          label_names: list[str], exported: dict, latency: dict, times: dict,
          total: float) -> str:
    """The demo's closing summary: quality side by side, then the export against Keras."""
    import numpy as np

    n_test = len(gold)
    lines = [f"sentiment, {NUM_TRAIN_EXAMPLES:,} training reviews, {n_test:,} held-out test "
             "reviews:",
             "| model | test accuracy |", "|---|---:|",
             f"| {MODEL} | {100 * runs[MODEL]['test']['accuracy']:.1f}% |",
             f"| {MODEL} + continued pretraining ({pretrained['global_step']:,} steps on the "
             f"training reviews) | {100 * runs['continued']['test']['accuracy']:.1f}% |",
             f"| the same shape from random init | "
             f"{100 * runs['random init']['test']['accuracy']:.1f}% |",
             f"| char n-gram TF-IDF + logistic regression | "
             f"{100 * tfidf['test']['accuracy']:.1f}% |",
             "", "the exported model (continued pretraining, fine-tuned) against Keras, on the "
             "test reviews:",
             "| artifact | same label | max abs(p - p_keras) | batch-1 latency |",
             "|---|---:|---:|---:|"]
    keras_labels = np.argmax(keras_probs, axis=1)
    gold_ids = np.array([label_names.index(g) for g in gold])
    for name, probs in exported.items():
        same = float(np.mean(np.argmax(probs, axis=1) == keras_labels))
        accuracy = float(np.mean(np.argmax(probs, axis=1) == gold_ids))
        lines.append(f"| {name} (test accuracy {100 * accuracy:.1f}%) | {100 * same:.1f}% | "
                     f"{float(np.max(np.abs(probs - keras_probs))):.1e} | "
                     f"{latency[name]:.1f} ms |")
    lines.append("")
    lines.append("time: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
                 + f"; total {total / 60:.1f} min")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
