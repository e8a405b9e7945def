"""Text classification end to end: `run_classification(ClassificationConfig) -> results`, behind
run_classifier.py.

Data comes from one of: a built-in task (`sentiment`; multi-label `people_daily_types`), a
benchmark task read by name from its folder (`task_name` with `data_dir`: GLUE's cola/mnli/mrpc,
xnli, CLUE's afqmc/tnews/iflytek/cmnli/ocnli, `tfbert.data.task_folders`, layouts in
docs/tasks.md), TSV/CSV/JSONL files, or a TensorFlow Datasets name. The run fine-tunes a
BertClassifier (from a checkpoint or random init), keeps the epoch with the best dev
`best_metric`, and writes to output_dir the files `tfbert.evaluation.classification_outputs` lists
(results.json, test predictions, google-research/bert's eval_results.txt and test_results.tsv,
the model).

Long inputs (`long_input`): "truncate" cuts a text to max_seq_length pieces (a pair longest
segment first); "windows" reads it whole as overlapping windows (`tfbert.data.classification.
pack_windows`) and a document's logits are the mean of its windows' logits, in training (the
loss is on the pooled logits: `tfbert.models.classifier.WindowPooledClassifier`), evaluation and
prediction. Multi-label (`multi_label`): sigmoid outputs, binary cross-entropy, and one threshold
per label tuned on dev after every epoch (`tfbert.evaluation.classification.tune_thresholds`;
the best epoch's are kept); the model's metadata holds them, with long_input and doc_stride, so
an eval-only run and the export decide alike.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from tfbert import checkpoints
from tfbert.data import classification as data
from tfbert.data import task_folders
from tfbert.data.windows import LONG_INPUT
from tfbert.errors import UserError
from tfbert.evaluation.classification import (
    DEFAULT_THRESHOLD,
    classification_metrics,
    multi_label_metrics,
    tune_thresholds,
)
from tfbert.evaluation.classification_outputs import (
    cross_entropy,
    predict_logits,
    sigmoid,
    softmax,
    write_eval_results,
    write_multi_label_predictions,
    write_predictions,
    write_test_results,
)
from tfbert.models.classifier import BertClassifier, MultiLabelCrossentropy, WindowPooledClassifier
from tfbert.tasks.base import Task
from tfbert.text.preprocessor import BertPreprocessor
from tfbert.text.tokenizer import BertTokenizer
from tfbert.training import finetune as ft
from tfbert.training.config import field
from tfbert.training.finetune import TaskConfig
from tfbert.training.outputs import Staging, save_model

logger = logging.getLogger(__name__)

BEST_METRICS = ("accuracy", "macro_f1")
MULTI_LABEL_BEST_METRICS = ("micro_f1", "macro_f1", "exact_match")


@dataclasses.dataclass
class ClassificationConfig(TaskConfig):
    """One classification run (the flags of run_classifier.py); TaskConfig has the shared
    fields (checkpoint, batch sizes, epochs, learning rate, do_train/do_eval/do_predict, ...).

    Args:
        task_name: str or None. Built-in task "sentiment" or "people_daily_types" (multi-label:
            the entity types a People's Daily sentence mentions), or with data_dir a benchmark
            task (`tfbert.data.task_folders.TASKS`: cola, mnli, mrpc, xnli, afqmc, tnews, iflytek,
            cmnli, ocnli); case-insensitive.
        data_dir: str or None. The benchmark task's folder (docs/tasks.md). Without do_train
            the dev split is read only for do_eval; MNLI's dev_mismatched.tsv is scored too
            (results["dev_mismatched"]) when present.
        xnli_language: str. XNLI's language (train multinli.train.LANG.tsv, dev/test rows).
        predict_batch_size: int or None. Batch for the test predictions (eval_batch_size when
            None).
        train_file, dev_file, test_file: str or None. TSV/CSV/JSONL files (columns text, label,
            optional text_b; multi-label: `labels` instead of label); test_file may lack labels
            (predictions only).
        tfds_name: str or None. TensorFlow Datasets name, e.g. "glue/mrpc".
        tfds_data_dir: str or None. TFDS data directory.
        tfds_splits: (train, dev, test) TFDS split names.
        head_hidden_layers: int. Dense layers between the pooled output and the logits (0-3).
        head_hidden_size: int. Width of those layers.
        dropout: float. Dropout in the head.
        best_metric: str or None. Dev metric that picks the epoch kept: "accuracy" (default) or
            "macro_f1"; multi-label "micro_f1" (default), "macro_f1" or "exact_match".
        long_input: str or None. "truncate" (the default) or "windows" (module docstring).
            None: "truncate", or in a run without do_train the saved model's.
        doc_stride: int or None. Windows: word pieces between window starts, 1 .. T - 3
            (T = max_seq_length). None: T // 2, or without do_train the saved model's.
        multi_label: bool. Every example has a set of labels (a `labels` column or list);
            implied by a multi-label built-in task. Without do_train it must match the model.
        class_weights: str or None. "balanced" or a file of label weights (a JSON object or
            `label<TAB>weight` lines): `tfbert.data.classification.class_weights`. A training
            option: results.json reports it, the model does not keep it.
    """

    task_name: str | None = None
    data_dir: str | None = None
    xnli_language: str = "zh"
    predict_batch_size: int | None = field(None, lower_bound=1)
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    tfds_name: str | None = None
    tfds_data_dir: str | None = None
    tfds_splits: tuple[str, str, str] = ("train", "validation", "test")
    head_hidden_layers: int = field(0, lower_bound=0, upper_bound=3)
    head_hidden_size: int = field(128, lower_bound=1)
    dropout: float = field(0.1, lower_bound=0, less_than=1)
    best_metric: str | None = None
    long_input: str | None = None
    doc_stride: int | None = None
    multi_label: bool = False
    class_weights: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task_name:
            self.task_name = self.task_name.lower()
        if self.data_dir and self.task_name not in task_folders.TASKS:
            raise UserError(f"data_dir needs a benchmark task_name (one of "
                            f"{sorted(task_folders.TASKS)}), got {self.task_name!r}")
        if self.task_name in task_folders.TASKS and not self.data_dir:
            raise UserError(f"task_name {self.task_name!r} reads its files from data_dir; give "
                            "--data_dir (the task's folder, see docs/tasks.md)")
        sources = [s for s, given in (("task_name", self.task_name),
                                      ("train_file/dev_file/test_file",
                                       self.train_file or self.dev_file or self.test_file),
                                      ("tfds_name", self.tfds_name)) if given]
        if len(sources) != 1:
            raise UserError("give exactly one data source: task_name, train_file/dev_file/"
                            f"test_file or tfds_name (got {sources or 'none'})")
        if self.task_name and self.task_name not in (*data.BUILTIN_TASKS, *task_folders.TASKS):
            raise UserError(f"unknown task_name {self.task_name!r}; built-in tasks: "
                            f"{data.BUILTIN_TASKS}, benchmark tasks (with data_dir): "
                            f"{sorted(task_folders.TASKS)}")
        if self.task_name in data.MULTI_LABEL_TASKS:
            self.multi_label = True
        elif self.multi_label and (self.task_name or self.tfds_name):
            raise UserError(f"multi_label: {self.task_name or self.tfds_name} is a single-label "
                            "task; multi-label data comes from files with a 'labels' column or "
                            f"the built-in {data.MULTI_LABEL_TASKS}")
        metrics = MULTI_LABEL_BEST_METRICS if self.multi_label else BEST_METRICS
        if self.best_metric is None:
            self.best_metric = metrics[0]
        if self.best_metric not in metrics:
            raise UserError(f"best_metric must be one of {metrics} for "
                            f"{'multi' if self.multi_label else 'single'}-label data, got "
                            f"{self.best_metric!r}")
        if self.long_input not in (None, *LONG_INPUT):
            raise UserError(f"long_input must be one of {LONG_INPUT}, got {self.long_input!r}")
        if self.doc_stride is not None:
            if self.long_input == "truncate":
                raise UserError("doc_stride applies to long_input=windows; with truncate there "
                                "are no windows")
            check_doc_stride(self.doc_stride, self.max_seq_length)
        if (self.class_weights and self.class_weights != "balanced"
                and "://" not in self.class_weights
                and not os.path.isfile(self.class_weights)):
            raise UserError(f"class_weights must be 'balanced' or a file of label weights; "
                            f"{self.class_weights!r} is neither")


def check_doc_stride(doc_stride: int, max_seq_length: int) -> None:
    """UserError unless 1 <= doc_stride < T - 2, the window body of a single text (a pair's
    body, T - 3 - len(a'), may be shorter: a stride over it steps by the body)."""
    body = max_seq_length - 2
    if isinstance(doc_stride, bool) or not isinstance(doc_stride, int) or not \
            1 <= doc_stride < body:
        raise UserError(f"doc_stride must be an integer in [1, {body}): below the window body "
                        f"max_seq_length - 2 = {body} (windows of max_seq_length "
                        f"{max_seq_length} then overlap), got {doc_stride!r}")


def load_data(config: ClassificationConfig) -> tuple[dict[str, list[Any] | None], list[str] | None]:
    """The train/dev/test examples the run needs (None where a split is not given or not needed)
    and the label names of the source in class-id order (the built-in or benchmark task's, the
    TFDS ClassLabel's, or sorted from the training file; None without training data). A
    benchmark run reads dev only for do_eval (google-research/bert's meaning), and MNLI's
    dev_mismatched beside it when the file is there."""
    needed = {"train": config.do_train,
              "dev": config.do_eval or (config.do_train and not config.data_dir),
              "test": config.do_predict}
    splits: dict[str, list[Any] | None] = {}
    labels = None
    for i, split in enumerate(("train", "dev", "test")):
        examples = None
        if needed[split] and config.data_dir:
            examples = task_folders.read_task(config.task_name, config.data_dir, split,
                                            config.xnli_language, config.input_encoding)
            labels = list(task_folders.TASKS[config.task_name].labels)
        elif needed[split] and config.task_name:
            examples, labels = (data.builtin_examples(config.task_name, split),
                                data.builtin_labels(config.task_name))
        elif needed[split] and config.tfds_name:
            examples, labels = data.tfds_examples(config.tfds_name, config.tfds_splits[i],
                                                  config.tfds_data_dir)
        elif needed[split]:
            path = {"train": config.train_file, "dev": config.dev_file,
                    "test": config.test_file}[split]
            examples = (data.read_examples(path, labelled=split != "test",
                                           encoding=config.input_encoding,
                                           multi_label=config.multi_label) if path else None)
            if split == "train" and examples:
                labels = data.label_list(examples)
        splits[split] = config.limit(examples, split)
    extra = [s for s in task_folders.TASKS[config.task_name].splits
             if s not in splits] if config.data_dir and config.do_eval else []
    for split in extra:  # MNLI's dev_mismatched
        path = task_folders.task_file(config.task_name, config.data_dir, split)
        if os.path.exists(path) or "://" in path:
            splits[split] = config.limit(task_folders.read_task(
                config.task_name, config.data_dir, split, config.xnli_language,
                config.input_encoding), "dev")
        else:
            logger.info("%s not found: %s not scored", path, split)
    return splits, labels


def run_classification(config: ClassificationConfig) -> dict[str, Any]:
    """Fine-tunes and/or evaluates a BertClassifier as `config` says; returns results.json.

    Example:
    >>> results = run_classification(ClassificationConfig(  # doctest: +SKIP
    ...     output_dir="out/sentiment", task_name="sentiment",
    ...     init_checkpoint="output/pretrain_default/model"))
    >>> results["test"]["accuracy"]  # doctest: +SKIP
    """
    with ft.task_run(config, "classification") as run:
        return _run(config, run)


def _run(config: ClassificationConfig, run: Staging) -> dict[str, Any]:
    keras.utils.set_random_seed(config.seed)
    if not config.do_train:  # before the data is read as single- or multi-label
        _check_multi_label(config)
    splits, labels = load_data(config)
    train, dev, test = splits["train"], splits["dev"], splits["test"]
    extra = {k: v for k, v in splits.items() if k not in ("train", "dev", "test") and v}
    if config.do_train and not train:
        raise UserError("do_train needs training data (train_file, task_name or tfds_name)")
    if config.do_predict and not test:
        raise UserError("do_predict needs test data (test_file, task_name or tfds_name)")
    if config.class_weights and not config.do_train:
        raise UserError("class_weights weighs the training loss: it needs do_train")
    pairs = any(e.text_b is not None for e in (train or dev or test or []))
    if pairs and config.max_seq_length < 5:
        raise UserError(f"max_seq_length {config.max_seq_length} is too short for sentence "
                        "pairs: [CLS] A [SEP] B [SEP] needs at least 5")

    saved: dict[str, Any] = {}
    global_step = 0  # of the checkpoint an eval-only run reads (GR's eval_results.txt)
    if config.do_train:
        model, vocab_file, lower_case = ft.build_model(
            BertClassifier, config, num_classes=len(labels),
            head_hidden_layers=config.head_hidden_layers,
            head_hidden_size=config.head_hidden_size, dropout=config.dropout,
            multi_label=config.multi_label)
    else:
        loaded = ft.load_finetuned(config, "classification", labels=labels)
        model, labels, vocab_file, lower_case = (loaded.model, loaded.labels,
                                                 loaded.vocab_file, loaded.lower_case)
        saved, global_step = loaded.metadata, loaded.global_step
    ft.check_seq_length(config, model)
    multi = config.multi_label
    logger.info("labels: %s", labels)
    if config.data_dir and labels != list(task_folders.TASKS[config.task_name].labels):
        raise UserError(f"{config.init_checkpoint}: the model's labels {labels} are not "
                        f"{config.task_name}'s {list(task_folders.TASKS[config.task_name].labels)}"
                        " (in that order)")
    for examples in (dev, test, *extra.values()):  # unknown labels fail here, before training
        if examples and data.is_labelled(examples):
            _targets(examples, labels, multi)
    weights = (data.class_weights(config.class_weights, train, labels, multi)
               if config.class_weights else None)  # (a bad file fails here too)
    long_input, doc_stride = _long_input(config, saved)
    inputs = _Inputs(config, vocab_file, lower_case, long_input, doc_stride, labels)
    if long_input == "windows":
        with model.distribute_strategy.scope():  # the strategy the model was built in
            runner = WindowPooledClassifier(model)  # documents [B, K, T] -> pooled logits
    else:
        runner = model

    batch = {"test": config.predict_batch_size or config.eval_batch_size}
    eval_ds = {split: inputs.dataset(split, examples, batch.get(split, config.eval_batch_size))
               for split, examples in (("dev", dev), ("test", test), *extra.items())
               if examples}

    def score(examples: list[data.ClassificationExample], logits: np.ndarray,
              thresholds: np.ndarray | None = None) -> dict[str, Any]:
        """Single-label: metrics of the argmax. Multi-label: metrics at `thresholds`, tuned on
        these examples when None."""
        if not multi:
            ids = data.label_ids(examples, labels)
            probabilities = softmax(logits)
            metrics = classification_metrics(ids, probabilities.argmax(-1), labels)
            metrics["loss"] = cross_entropy(ids, probabilities)
            return metrics
        y = data.label_matrix(examples, labels)
        probabilities = sigmoid(logits)
        if thresholds is None:
            thresholds = tune_thresholds(y, probabilities)
        metrics = multi_label_metrics(y, probabilities >= thresholds, labels)
        metrics["loss"] = float(MultiLabelCrossentropy()(y, logits))
        metrics["thresholds"] = dict(zip(labels, thresholds.tolist(), strict=True))
        return metrics

    results: dict[str, Any] = {"labels": labels, "multi_label": multi,
                               "long_input": {"mode": long_input,
                                              **({"doc_stride": doc_stride}
                                                 if long_input == "windows" else {})},
                               "run_id": run.run_id}
    thresholds = _saved_thresholds(saved, labels) if multi and not config.do_train else None
    if weights is not None:
        results["class_weights"] = {
            "source": config.class_weights,
            "positive_weights" if multi else "weights": dict(zip(labels, weights.tolist(),
                                                                 strict=True))}
        logger.info("class weights (%s): %s", config.class_weights, results["class_weights"])
    if config.do_train:
        targets = _targets(train, labels, multi)
        loss = (MultiLabelCrossentropy(positive_weights=weights) if multi
                else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        train_ds = inputs.dataset(
            "train", train, config.micro_batch_size, labelled=True, shuffle=True,
            sample_weights=None if multi or weights is None else weights[targets])
        outcome = ft.finetune(
            runner, train_ds, loss=loss,
            config=config.finetune_config(config.best_metric, log_dir=run.path("logs")),
            evaluate_fn=(lambda m: score(dev, predict_logits(m, eval_ds["dev"])))
            if dev else None)
        results["train"] = {"learning_rate": config.learning_rate,
                            "num_examples": len(train), "best_epoch": outcome.best_epoch,
                            "num_train_steps": outcome.num_train_steps,
                            "stopped_epoch": outcome.stopped_epoch,
                            "history": outcome.history}
        if outcome.best_metrics:
            results["dev"] = outcome.best_metrics
        if multi:
            if dev:
                thresholds = np.asarray([outcome.best_metrics["thresholds"][n] for n in labels],
                                        np.float32)
            else:
                logger.warning("no dev data to tune the label thresholds on: every label "
                               "keeps %g", DEFAULT_THRESHOLD)
                thresholds = np.full(len(labels), DEFAULT_THRESHOLD, np.float32)
        save_model(model, run.path("model"), vocab_file=vocab_file,
                   metadata={"task": "classification", "labels": labels,
                             "max_seq_length": config.max_seq_length,
                             "lower_case": lower_case,
                             "pair": any(e.text_b is not None for e in train),
                             "multi_label": multi, "long_input": long_input,
                             **({"doc_stride": doc_stride} if long_input == "windows" else {}),
                             **({"thresholds": thresholds.tolist()} if multi else {}),
                             "run_id": run.run_id})
    if multi:
        results["thresholds"] = dict(zip(labels, thresholds.tolist(), strict=True))
        results["thresholds_from"] = ("dev" if config.do_train and dev else "default"
                                      if config.do_train else "model")
    if inputs.stats:
        results["data"] = inputs.stats
    if config.do_eval and dev and "dev" not in results:
        results["dev"] = score(dev, predict_logits(runner, eval_ds["dev"]), thresholds)
    for split, examples in extra.items():
        results[split] = score(examples, predict_logits(runner, eval_ds[split]), thresholds)
    if config.data_dir and config.do_eval and "dev" in results:
        write_eval_results(run.path("eval_results.txt"), results["dev"],
                           results.get("train", {}).get("num_train_steps", global_step))
    if config.do_predict:
        logits = predict_logits(runner, eval_ds["test"])
        if data.is_labelled(test):
            results["test"] = score(test, logits, thresholds)
        else:
            logger.info("test data has no labels: writing predictions only")
        if multi:
            write_multi_label_predictions(run.path("test_predictions.jsonl"), test,
                                          sigmoid(logits), thresholds, labels)
        else:
            write_predictions(run.path("test_predictions.tsv"), test, softmax(logits), labels)
        if config.data_dir:
            write_test_results(run.path("test_results.tsv"), softmax(logits))
    for split in ("dev", *extra, "test"):
        if split in results:
            r = results[split]
            if multi:
                logger.info("%s: micro-F1 %.4f, macro-F1 %.4f, exact match %.4f", split,
                            r["micro_f1"], r["macro_f1"], r["exact_match"])
            else:
                logger.info("%s: accuracy %.4f, macro-F1 %.4f", split, r["accuracy"],
                            r["macro_f1"])
    ft.write_results(run.directory, results)
    return results


def _check_multi_label(config: ClassificationConfig) -> None:
    """UserError when a run without do_train reads its data as multi-label and the model is
    single-label, or the other way round (tfbert.json's model_config says which)."""
    path = config.init_checkpoint
    if not path or not os.path.isfile(os.path.join(path, "tfbert.json")):
        return  # (load_finetuned says what is wrong with it)
    multi = bool(checkpoints.read_metadata(path).get("model_config", {}).get("multi_label"))
    if multi != config.multi_label:
        raise UserError(f"{path}: the model is {'multi' if multi else 'single'}-label; "
                        f"{'pass' if multi else 'leave out'} multi_label")


def _targets(examples: Sequence[data.ClassificationExample], labels: Sequence[str],
             multi_label: bool) -> np.ndarray:
    """Class ids [N], or multi-hot label sets [N, C]."""
    return (data.label_matrix(examples, labels) if multi_label
            else data.label_ids(examples, labels))


def _long_input(config: ClassificationConfig, saved: dict[str, Any]) -> tuple[str, int]:
    """(long_input, doc_stride) of the run: the config's, else the saved model's (a run without
    do_train), else truncate and max_seq_length // 2."""
    long_input = config.long_input or saved.get("long_input", "truncate")
    if config.doc_stride is not None:
        doc_stride = config.doc_stride
    elif config.long_input is None and "doc_stride" in saved:
        doc_stride = int(saved["doc_stride"])
    else:
        doc_stride = config.max_seq_length // 2
    if long_input not in LONG_INPUT:
        raise UserError(f"{config.init_checkpoint}: tfbert.json's long_input {long_input!r} is "
                        f"not one of {LONG_INPUT}")
    if long_input == "windows":
        check_doc_stride(doc_stride, config.max_seq_length)
    return long_input, doc_stride


def _saved_thresholds(saved: dict[str, Any], labels: Sequence[str]) -> np.ndarray:
    """The label thresholds in a multi-label model's metadata (DEFAULT_THRESHOLD without)."""
    if "thresholds" not in saved:
        logger.warning("the model's tfbert.json holds no label thresholds: every label gets %g",
                       DEFAULT_THRESHOLD)
        return np.full(len(labels), DEFAULT_THRESHOLD, np.float32)
    thresholds = np.asarray(saved["thresholds"], np.float32)
    if thresholds.shape != (len(labels),):
        raise UserError(f"tfbert.json holds {thresholds.size} thresholds for {len(labels)} "
                        "labels")
    return thresholds


class _Inputs:
    """The model inputs of a run's examples: packed and cut (truncate), or whole, as windows
    batched by document (windows; their counts go to `stats`)."""

    def __init__(self, config: ClassificationConfig, vocab_file: str, lower_case: bool,
                 long_input: str, doc_stride: int, labels: Sequence[str]) -> None:
        self.config, self.doc_stride, self.labels = config, doc_stride, labels
        self.windows = long_input == "windows"
        self.stats: dict[str, dict[str, int]] = {}
        if self.windows:
            self.tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)
        else:
            self.preprocessor = BertPreprocessor(vocab_file, config.max_seq_length,
                                                        lower_case=lower_case)

    def dataset(self, split: str, examples: Sequence[data.ClassificationExample],
                batch_size: int, labelled: bool = False, shuffle: bool = False,
                sample_weights: np.ndarray | None = None) -> Any:
        """Batches of inputs, or (inputs, targets[, weights]) when `labelled`."""
        seed, multi = self.config.seed, self.config.multi_label
        buckets = self.config.length_buckets
        if not self.windows:
            return data.make_dataset(examples, self.preprocessor,
                                     self.labels if labelled else None, batch_size,
                                     shuffle=shuffle, seed=seed, multi_label=multi,
                                     sample_weights=sample_weights, length_buckets=buckets)
        features = data.encode_windows(examples, self.tokenizer, self.config.max_seq_length,
                                       self.doc_stride)
        self.stats[split] = features.stats
        logger.info("%s: %d documents in %d windows (%d over one window, at most %d)", split,
                    *features.stats.values())
        targets = _targets(examples, self.labels, multi) if labelled else None
        return data.make_window_dataset(features, targets, batch_size, shuffle=shuffle,
                                        seed=seed, sample_weights=sample_weights,
                                        length_buckets=buckets)


TASK = Task("classification", BertClassifier, export="classification", command="classifier",
            config_class=ClassificationConfig, run=run_classification, load_data=load_data)
