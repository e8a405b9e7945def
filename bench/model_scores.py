"""Scores and batch-1 latencies of one fine-tuned model as Keras float32 and as TFLite files, on
a built-in task's full test split: sentiment (accuracy) and People's Daily NER (entity F1), for
bench/distill.py and experiments/int8_study.py.

`study_task` exports the model to TFLite at the quantizations asked (ids-in and/or text-in
files), scores the Keras model and every file, and returns one row per model: size in bytes,
latency (median and fastest of `latency_runs` batch-1 calls after one warm-up; TFLite with its
default one thread, the Keras model as a tf.function), test score in %, and agreement with the
Keras model's predictions (texts for sentiment, tokens' tags for NER). `saved_model_row` adds
the TF Serving SavedModel's size and batch-1 latency (its serve_ids signature).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

SAMPLE_TEXT = "今天天气很好，我们去公园散步。"  # export_tflite's latency input


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
    # NER's text models read first windows only: a second float row scores that (with them)
    for reads in ("ids", "text") if task != "sentiment" and "text" in kinds else ("ids",):
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


def saved_model_row(model_dir: str, export_dir: str, latency_runs: int) -> dict[str, Any]:
    """The TF Serving SavedModel of `model_dir` (exported to `export_dir`, a version folder,
    replaced if tfbert wrote it): its size in bytes and the batch-1 latency of its serve_ids
    signature on SAMPLE_TEXT's ids (median and fastest, as `timings_ms`)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer op the SavedModel holds)

    from tfbert.export import export_model, load_for_export
    from tfbert.text.preprocessor import BertPreprocessor

    export_model(model_dir, export_dir, check=False, overwrite=True)
    _, vocab_file, spec, _ = load_for_export(model_dir)
    ids = BertPreprocessor(vocab_file, spec.seq_length, lower_case=spec.lower_case)(
        tf.constant([SAMPLE_TEXT]))
    serve_ids = tf.saved_model.load(export_dir).signatures["serve_ids"]
    size = sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(export_dir) for name in names)
    return {"bytes": int(size), **timings_ms(lambda: serve_ids(**ids), latency_runs)}
