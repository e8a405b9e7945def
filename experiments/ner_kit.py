"""The NER kit measured: windows vs truncation, CRF vs softmax, label alignment first vs all.

Every run fine-tunes the same small random-init BERT (2 layers, hidden 128, a character vocab of
People's Daily's train split) on the built-in People's Daily NER with run_ner, at
max_seq_length 64 (many sentences are longer), the same data, seed and hyperparameters; only
the option under study differs:

    windows_softmax   --long_input=windows (default), softmax head, --label_alignment=first
    truncate_softmax  --long_input=truncate
    windows_crf       --crf
    windows_all       --label_alignment=all

Then, for the softmax and CRF models: tags per second of Keras predict (+ Viterbi for the CRF)
on the test windows, and the exported SavedModel's text path against the Keras model (logits
per piece, entity character spans) on the test sentences.

    nice -n 10 python -m experiments.ner_kit --output_dir=output/ner_kit
    nice -n 10 python -m experiments.ner_kit --output_dir=output/ner_kit --phase=measure

Writes OUTPUT_DIR/ner_kit.json and OUTPUT_DIR/ner_kit.md (a table).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import platform
import subprocess
import time
from typing import Any

import numpy as np

logger = logging.getLogger("ner_kit")

RUNS = {"windows_softmax": {},
        "truncate_softmax": {"long_input": "truncate"},
        "windows_crf": {"crf": True},
        "windows_all": {"label_alignment": "all"}}


def prepare(output_dir: str) -> tuple[str, str]:
    """(bert_config.json, vocab.txt) of the study's model: every character of the train split
    seen at least twice, 2 layers, hidden 128."""
    import tfbert
    from tfbert.data import ner

    vocab_file = os.path.join(output_dir, "vocab.txt")
    config_file = os.path.join(output_dir, "bert_config.json")
    if not os.path.exists(vocab_file):
        counts = collections.Counter(ch for e in ner.people_daily_ner("train") for ch in e.tokens)
        chars = sorted(c for c, n in counts.items() if n >= 2 and not c.isspace())
        tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
        with open(vocab_file, "w", encoding="utf-8") as f:
            f.write("\n".join(tokens) + "\n")
    with open(vocab_file, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    tfbert.BertConfig(vocab_size=vocab_size, hidden_size=128, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=512,
                      max_position_embeddings=128, lower_case=False).to_json_file(config_file)
    return config_file, vocab_file


def train(output_dir: str, args: argparse.Namespace) -> dict[str, Any]:
    from tfbert.tasks.ner import NerConfig, run_ner

    config_file, vocab_file = prepare(output_dir)
    out = {}
    for name, options in RUNS.items():
        if args.only and name not in args.only:
            continue
        start = time.perf_counter()
        results = run_ner(NerConfig(
            output_dir=os.path.join(output_dir, name), task_name="people_daily",
            bert_config_file=config_file, vocab_file=vocab_file,
            max_seq_length=args.max_seq_length, max_train_examples=args.max_train_examples,
            max_eval_examples=args.max_eval_examples, num_train_epochs=args.epochs,
            train_batch_size=32, learning_rate=args.learning_rate, seed=0,
            distribution_strategy="one_device", verbose=2, **options))
        out[name] = {"options": options, "seconds": round(time.perf_counter() - start, 1),
                     **{split: {k: results[split][k] for k in ("precision", "recall", "f1")}
                        for split in ("dev", "test")},
                     "data": results["data"], "num_windows": results["train"]["num_windows"]}
        logger.info("%s: test F1 %.4f", name, out[name]["test"]["f1"])
    return out


def measure(output_dir: str, args: argparse.Namespace) -> dict[str, Any]:
    """Tags/s of Keras predict and SavedModel parity for the softmax and CRF models."""
    import tensorflow as tf

    import tfbert
    from tfbert.data import ner
    from tfbert.evaluation.ner import entity_spans
    from tfbert.export import export_model
    from tfbert.tasks.ner import predict_tags

    examples = ner.people_daily_ner("test")[:args.max_eval_examples]
    out = {}
    for name in ("windows_softmax", "windows_crf"):
        model_dir = os.path.join(output_dir, name, "model")
        if not os.path.isdir(model_dir):
            continue
        model = tfbert.checkpoints.load_model(model_dir)
        metadata = tfbert.checkpoints.read_metadata(model_dir)
        tokenizer = tfbert.BertTokenizer(os.path.join(model_dir, "vocab.txt"), lower_case=False)
        features = ner.encode_examples(examples, tokenizer, metadata["max_seq_length"],
                                       metadata["labels"], long_input="windows",
                                       doc_stride=metadata["doc_stride"])
        predict_tags(model, features, metadata["labels"], 64)  # warm-up (tracing)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            tags = predict_tags(model, features, metadata["labels"], 64)
            times.append(time.perf_counter() - start)
        num_tokens = sum(len(e.tokens) for e in examples)
        # The SavedModel's text path against the Keras model.
        export_dir = os.path.join(output_dir, "saved_models", name)
        if not os.path.isdir(export_dir):
            export_model(model_dir, export_dir, check=False)
        version = os.path.join(export_dir, sorted(os.listdir(export_dir), key=int)[-1])
        serve = tf.saved_model.load(version).signatures["serving_default"]
        logits = model.predict(features.inputs(), batch_size=64, verbose=0)
        pieces = ner.piece_logits(features, logits)
        max_diff, same_entities = 0.0, 0
        for begin in range(0, len(examples), 64):
            batch = examples[begin:begin + 64]
            got = {k: v.numpy() for k, v in serve(text=tf.constant([e.text for e in batch]))
                   .items()}
            for i, example in enumerate(batch):
                want = pieces[begin + i]
                max_diff = max(max_diff, float(np.abs(got["logits"][i, :len(want)] - want).max(
                    initial=0.0)))
                n = int(got["entity_count"][i])
                have = [(int(s), int(e), t.decode()) for s, e, t in zip(
                    got["entity_starts"][i][:n], got["entity_ends"][i][:n],
                    got["entity_labels"][i][:n], strict=True)]
                wanted = [(d["start"], d["end"], d["type"]) for d in entity_spans(
                    tags[begin + i], example.token_offsets(), example.text)]
                same_entities += have == wanted
        out[name] = {"sentences": len(examples), "tokens": num_tokens,
                     "windows": len(features.input_ids),
                     "keras_tags_per_s": round(num_tokens / min(times)),
                     "savedmodel_max_abs_logit_diff": max_diff,
                     "savedmodel_sentences_with_same_entities": same_entities}
        logger.info("%s: %s", name, out[name])
    return out


def cpu_name() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines
                    if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor()


def table(results: dict[str, Any]) -> str:
    rows = ["| run | dev F1 | test F1 | test tokens without a prediction | windows (train) |",
            "|---|---|---|---|---|"]
    for name, r in results.get("train", {}).items():
        rows.append(f"| {name} | {r['dev']['f1']:.4f} | {r['test']['f1']:.4f} | "
                    f"{r['data']['test']['unpredicted_tokens']} | {r['num_windows']} |")
    if results.get("measure"):
        rows += ["", "| model | Keras tags/s | SavedModel max abs logit diff | "
                 "sentences with the same entities |", "|---|---|---|---|"]
        for name, r in results["measure"].items():
            rows.append(f"| {name} | {r['keras_tags_per_s']} | "
                        f"{r['savedmodel_max_abs_logit_diff']:.2e} | "
                        f"{r['savedmodel_sentences_with_same_entities']}/{r['sentences']} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output_dir", default="output/ner_kit")
    parser.add_argument("--phase", choices=("all", "train", "measure"), default="all")
    parser.add_argument("--only", nargs="*", choices=sorted(RUNS), default=None)
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--max_train_examples", type=int, default=3000)
    parser.add_argument("--max_eval_examples", type=int, default=1000)
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.makedirs(args.output_dir, exist_ok=True)
    path = os.path.join(args.output_dir, "ner_kit.json")
    results: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
    results["cpu"] = cpu_name()
    if args.phase in ("all", "train"):  # (the settings of the runs, not of a measure phase)
        results["settings"] = {k: v for k, v in vars(args).items()
                               if k not in ("phase", "only")}
        results.setdefault("train", {}).update(train(args.output_dir, args))
    if args.phase in ("all", "measure"):
        results["measure"] = measure(args.output_dir, args)
    from tfbert.fileio import write_json

    write_json(path, results)
    with open(os.path.join(args.output_dir, "ner_kit.md"), "w", encoding="utf-8") as f:
        f.write(f"CPU: {results['cpu']}\n\n" + table(results))
    print(table(results))


if __name__ == "__main__":
    main()
