"""int8 TFLite against the float model on sentiment (accuracy) and People's Daily NER (entity F1).

Takes fine-tuned model folders (it fine-tunes nothing), exports each to TFLite at every
quantization of `tfbert.export.tflite` (ids-in and text-in models), scores the Keras float32
model and every file on the full test split, and writes a JSON record and a Markdown table:
size in bytes, batch-1 latency (median and fastest of --latency_runs calls on this CPU; TFLite
with its default one thread, the Keras model as a tf.function), test score, its difference to
the Keras float32 score in points, and agreement with the Keras model's predictions (texts for
sentiment, tokens' tags for NER).

    python -m experiments.int8_study --sentiment_model=output/demo/pretrained/model \\
        --ner_model=output/int8_dev/ner/model --ner_crf_model=output/int8_dev/ner_crf/model

The ids models read every window of a long sentence as run_ner does; the text models pack the
first window only (tfbert/export/tflite.py), so a NER task gets a second float row, the Keras
model on the first window of each sentence, and the text rows' "same inputs" difference and
agreement are against it (the ids rows' against the Keras model on all windows).

The .tflite files go to --work_dir/<task>/ (files tfbert wrote there before are replaced);
the record to --output (default bench/results/int8_study-<machine>-<date>.json, refused if it
exists), the table beside the files (--work_dir/int8_study.md) and on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.common import machine_name
from tfbert.fileio import write_json, write_text

TASKS = {"sentiment": "sentiment_model", "ner": "ner_model", "ner_crf": "ner_crf_model"}
SAMPLE_TEXT = "今天天气很好，我们去公园散步。"  # export_tflite's latency input
METRIC = {"sentiment": "accuracy %", "ner": "entity F1 %", "ner_crf": "entity F1 %"}


def timings_ms(call: Callable[[], Any], runs: int) -> dict[str, float]:
    """{"latency_ms" (median), "latency_min_ms"} of `runs` calls after one warm-up call."""
    call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"latency_ms": float(np.median(times) * 1000),
            "latency_min_ms": float(np.min(times) * 1000)}


def test_examples(task: str, max_examples: int | None) -> list[Any]:
    from tfbert.data import classification, ner

    examples = (classification.builtin_examples("sentiment", "test") if task == "sentiment"
                else ner.people_daily_ner("test"))
    return examples[:max_examples] if max_examples else examples


def keras_predictions(task: str, model: Any, vocab_file: str, spec: Any,
                      examples: Sequence[Any], first_window: bool = False) -> Any:
    """The float model's predictions as the run scores them: label ids [N], or tag lists
    (`first_window`: read from each sentence's first window only, as the text models do)."""
    import tensorflow as tf

    from tfbert.data import ner
    from tfbert.export.tflite_eval import ner_features
    from tfbert.text.preprocessor import BertPreprocessor

    if task == "sentiment":
        inputs = BertPreprocessor(vocab_file, spec.seq_length, lower_case=spec.lower_case)(
            tf.constant([e.text for e in examples]))
        return np.argmax(model.predict(dict(inputs), batch_size=64, verbose=0), -1)
    features = ner_features(examples, vocab_file, spec, text_model=first_window)
    logits = model.predict(features.inputs(), batch_size=64, verbose=0)
    viterbi = model.decode if getattr(model, "crf", None) is not None else None
    return ner.decode_logits(features, np.asarray(logits), spec.labels, viterbi)


def score(task: str, predicted: Any, examples: Sequence[Any], spec: Any) -> float:
    """Accuracy or entity F1, in %."""
    from tfbert.evaluation.ner import entity_metrics

    if task == "sentiment":
        gold = np.array([spec.labels.index(e.label) for e in examples])
        return 100 * float(np.mean(predicted == gold))
    return 100 * entity_metrics([e.tags for e in examples], predicted)["f1"]


def agreement(task: str, predicted: Any, reference: Any) -> float:
    """% of texts (sentiment) or tokens (NER) predicted as in `reference`."""
    if task == "sentiment":
        return 100 * float(np.mean(np.asarray(predicted) == np.asarray(reference)))
    return 100 * float(np.mean([a == b for x, y in zip(predicted, reference, strict=True)
                                for a, b in zip(x, y, strict=True)]))


def study_task(task: str, model_dir: str, work_dir: str, quantizations: Sequence[str],
               kinds: Sequence[str], max_examples: int | None, latency_runs: int,
               num_threads: int | None) -> list[dict[str, Any]]:
    """Rows of one task: the Keras float32 model (and, for NER, on first windows), then every
    .tflite file."""
    import tensorflow as tf

    from tfbert.export import load_for_export, tflite, tflite_eval
    from tfbert.text.preprocessor import BertPreprocessor

    model, vocab_file, spec, _ = load_for_export(model_dir)
    examples = test_examples(task, max_examples)
    common = {"task": task, "model_dir": model_dir, "examples": len(examples)}
    ids_sample = {k: tf.constant(v) for k, v in BertPreprocessor(
        vocab_file, spec.seq_length, lower_case=spec.lower_case)(
        tf.constant([SAMPLE_TEXT])).items()}
    forward = tf.function(lambda x: model(x, training=False))
    keras_size = int(sum(np.prod(w.shape) * 4 for w in model.weights))  # float32 weights
    references, rows = {}, []
    for reads in ("ids", "text") if task != "sentiment" else ("ids",):
        start = time.perf_counter()
        predicted = keras_predictions(task, model, vocab_file, spec, examples,
                                      first_window=reads == "text")
        references[reads] = predicted
        rows.append({**common, "file": "Keras" if reads == "ids" else "Keras, first window",
                     "inputs": reads, "quantization": "float32", "bytes": keras_size,
                     **timings_ms(lambda: forward(ids_sample), latency_runs),
                     "score": score(task, predicted, examples, spec),
                     "agreement": 100.0, "seconds": time.perf_counter() - start})
    references.setdefault("text", references["ids"])  # classification reads one window
    same_inputs = {r["inputs"]: r["score"] for r in rows}
    same_inputs.setdefault("text", same_inputs["ids"])
    files = tflite.export_tflite(model, spec, vocab_file, os.path.join(work_dir, task),
                                 quantizations, kinds, sample_text=SAMPLE_TEXT, overwrite=True)
    for name, info in files.items():
        start = time.perf_counter()
        reads = info["inputs"]
        runner = tflite.make_interpreter(info["path"], text_ops=reads == "text"
                                         ).get_signature_runner()
        sample = ({"text": np.array([SAMPLE_TEXT.encode()], dtype=object)} if reads == "text"
                  else {k: v.numpy() for k, v in ids_sample.items()})
        if task == "sentiment":
            predicted = tflite_eval.predict_labels(info["path"], [e.text for e in examples],
                                                   vocab_file, spec, num_threads=num_threads)
        else:
            predicted = tflite_eval.ner_tags(info["path"], examples, vocab_file, spec,
                                             num_threads=num_threads)
        rows.append({**common, "file": name, "inputs": reads,
                     "quantization": info["quantization"], "bytes": info["bytes"],
                     **timings_ms(functools.partial(runner, **sample), latency_runs),
                     "score": score(task, predicted, examples, spec),
                     "agreement": agreement(task, predicted, references[reads]),
                     "seconds": time.perf_counter() - start})
        print(f"{task} {name}: {rows[-1]['score']:.2f} ({rows[-1]['seconds']:.0f} s)",
              flush=True)
    for row in rows:
        row["difference"] = row["score"] - rows[0]["score"]
        row["difference_same_inputs"] = row["score"] - same_inputs[row["inputs"]]
    return rows


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as one Markdown table."""
    lines = ["| task | model | bytes | latency ms, median / fastest (batch 1) | test score | "
             "vs Keras float32 | vs float, same inputs | agrees with float, same inputs |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        model = ({"Keras": "Keras float32", "Keras, first window": "Keras float32, first "
                  "window only"}.get(r["file"])
                 or f"TFLite {r['inputs']}-in {r['quantization']}")
        lines.append(f"| {r['task']} ({METRIC[r['task']]}) | {model} | {r['bytes']:,} | "
                     f"{r['latency_ms']:.2f} / {r['latency_min_ms']:.2f} | {r['score']:.2f} | "
                     f"{r['difference']:+.2f} | {r['difference_same_inputs']:+.2f} | "
                     f"{r['agreement']:.2f}% |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    from tfbert.export.tflite import KINDS, QUANTIZATIONS

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for task, flag in TASKS.items():
        parser.add_argument(f"--{flag}", default=None,
                            help=f"fine-tuned {task} model folder (default: skip the task)")
    parser.add_argument("--quantizations", default=",".join(QUANTIZATIONS))
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--work_dir", default="output/int8_study",
                        help="where the .tflite files and the table go")
    parser.add_argument("--output", default=None,
                        help="the JSON record (default: bench/results/int8_study-MACHINE-DATE"
                             ".json)")
    parser.add_argument("--max_examples", type=int, default=None,
                        help="score the first N test examples only (default: all)")
    parser.add_argument("--latency_runs", type=int, default=200)
    parser.add_argument("--num_threads", type=int, default=None,
                        help="interpreter threads while scoring (default: TFLite's, one)")
    args = parser.parse_args(argv)
    models = {task: getattr(args, flag) for task, flag in TASKS.items() if getattr(args, flag)}
    if not models:
        raise SystemExit("int8_study: give at least one of "
                         + ", ".join(f"--{flag}" for flag in TASKS.values()))
    for task, model_dir in models.items():
        if not os.path.isdir(model_dir):
            raise SystemExit(f"int8_study: --{TASKS[task]} {model_dir}: no such folder")
    date = datetime.date.today().isoformat()
    output = args.output or os.path.join("bench", "results",
                                         f"int8_study-{machine_name()}-{date}.json")
    if os.path.exists(output):
        raise SystemExit(f"int8_study: {output} exists; give another --output")
    rows, load = [], [os.getloadavg()]
    for task, model_dir in models.items():
        rows += study_task(task, model_dir, args.work_dir, args.quantizations.split(","),
                           args.kinds.split(","), args.max_examples, args.latency_runs,
                           args.num_threads)
    load.append(os.getloadavg())
    table = markdown(rows)
    command = " ".join(["python -m experiments.int8_study",
                        *(sys.argv[1:] if argv is None else argv)])
    write_json(output, {"machine": machine_name(), "date": date, "command": command,
                        "cpu_count": os.cpu_count(), "load_average_start_end": load,
                        "rows": rows, "markdown": table})
    write_text(os.path.join(args.work_dir, "int8_study.md"), table)
    print(table)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
