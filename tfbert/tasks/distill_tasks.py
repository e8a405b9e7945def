"""What a distillation run needs from its teacher's task: the training rows (the labelled
training set, unlabelled text, augmented copies), the dev and test scores, the student's
tfbert.json and test predictions. One class per task that `tfbert.tasks.distill` runs:
`ClassificationDistill` (the classification task's data, single or multi-label, single texts or
pairs) and `NerDistill` (the NER task's sentences as windows; softmax or CRF). Each reads its data
with the task's own reader (`registry.get(name).load_data`), never importing the task module.

Rows are numpy arrays padded to max_seq_length: the inputs, the targets and the sample weights
(0 on unlabelled rows: no hard loss there), and for NER the positions the soft loss reads
(`Rows.distill_mask`: each token's labelled word piece in the window where it has the most
context, on unlabelled sentences too).

Example:
>>> kind = KINDS["ner"](config)  # doctest: +SKIP
>>> kind.prepare(vocab_file, lower_case, labels)  # doctest: +SKIP
>>> rows = kind.training_rows()  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from tfbert.data import classification as cls_data
from tfbert.data import distill_data
from tfbert.data import ner as ner_data
from tfbert.errors import UserError
from tfbert.evaluation import classification_outputs
from tfbert.evaluation.classification import (
    DEFAULT_THRESHOLD,
    classification_metrics,
    multi_label_metrics,
    tune_thresholds,
)
from tfbert.evaluation.ner import entity_metrics, write_predictions
from tfbert.models.classifier import MultiLabelCrossentropy
from tfbert.models.token_classifier import training_loss
from tfbert.tasks import registry
from tfbert.text.preprocessor import BertPreprocessor
from tfbert.text.tokenizer import BertTokenizer
from tfbert.training.outputs import Staging

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Rows:
    """The training rows: packed inputs (numpy [N, T]), targets and sample weights (0 for
    unlabelled rows), the soft loss's positions (token tasks), and counts."""

    inputs: dict[str, np.ndarray]
    labels: np.ndarray
    weights: np.ndarray
    distill_mask: np.ndarray | None
    counts: dict[str, Any]


def _concat(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _texts(splits: dict[str, Any]) -> set[str]:
    """The texts of a run's labelled splits (what built-in unlabelled text leaves out)."""
    return {e.text for examples in splits.values() for e in examples or []}


def _unlabelled_texts(config: Any, pair: bool, exclude: set[str]
                      ) -> list[distill_data.UnlabelledText]:
    """The run's unlabelled examples (file or built-in), at most max_unlabelled_examples."""
    if config.unlabelled_file:
        texts = distill_data.read_unlabelled(config.unlabelled_file, pair,
                                             config.input_encoding)
    elif config.unlabelled_builtin:
        if pair:
            raise UserError(f"unlabelled_builtin {config.unlabelled_builtin} holds single "
                            "texts; the teacher takes sentence pairs: give unlabelled_file "
                            "(text<TAB>text_b lines)")
        texts = distill_data.builtin_unlabelled(config.unlabelled_builtin, exclude)
    else:
        return []
    return texts[:config.max_unlabelled_examples] if config.max_unlabelled_examples else texts


# --- classification ----------------------------------------------------------------------------


class ClassificationDistill:
    """A classification teacher's data, scores and outputs."""

    def __init__(self, config: Any) -> None:
        self.config = config
        splits, self.data_labels = registry.get("classification").load_data(config)
        self.train, self.dev, self.test = splits["train"], splits["dev"], splits["test"]
        if not self.train:
            raise UserError("distillation needs the labelled training set (train_file, "
                            "task_name or tfds_name)")
        self.multi = config.multi_label
        self.metric = config.best_metric
        self.pair = any(e.text_b is not None for e in self.train)
        self.eval_splits = [s for s, e in (("dev", self.dev), ("test", self.test))
                            if e and cls_data.is_labelled(e)]
        self.unlabelled = _unlabelled_texts(config, self.pair, _texts(splits))

    def check_teacher(self, teacher: Any, loaded: Any) -> None:
        if teacher.multi_label != self.multi:
            raise UserError(f"teacher_dir {self.config.init_checkpoint}: the teacher is "
                            f"{'multi' if teacher.multi_label else 'single'}-label, the data "
                            f"{'multi' if self.multi else 'single'}-label")
        pair = loaded.metadata.get("pair")
        if pair is not None and bool(pair) != self.pair:
            raise UserError(f"teacher_dir {self.config.init_checkpoint}: the teacher reads "
                            f"{'sentence pairs' if pair else 'single texts'}, the training data "
                            f"{'pairs' if self.pair else 'single texts'}")
        if self.config.long_input not in (None, "truncate"):
            raise UserError("distillation reads classification texts cut to max_seq_length "
                            "(long_input truncate)")
        self.metadata = loaded.metadata

    def prepare(self, vocab_file: str, lower_case: bool, labels: list[str]) -> None:
        self.labels, self.lower_case = labels, lower_case
        self.preprocessor = BertPreprocessor(vocab_file, self.config.max_seq_length,
                                             lower_case=lower_case)
        for examples in (self.train, self.dev, self.test):  # unknown labels fail here
            if examples and cls_data.is_labelled(examples):
                self._targets(examples)
        self.eval_inputs = {s: self._inputs(e) for s, e in (("dev", self.dev),
                                                             ("test", self.test)) if e}

    def _targets(self, examples: Sequence[Any]) -> np.ndarray:
        return (cls_data.label_matrix(examples, self.labels) if self.multi
                else cls_data.label_ids(examples, self.labels))

    def _inputs(self, examples: Sequence[Any]) -> dict[str, np.ndarray]:
        batches = cls_data.make_dataset(examples, self.preprocessor, None, 1024)
        return _concat([{k: v.numpy() for k, v in b.items()} for b in batches])

    @property
    def description(self) -> str:
        c = self.config
        data = c.task_name or c.tfds_name or c.train_file
        extra = c.unlabelled_file or c.unlabelled_builtin
        return f"{data}" + (f" + {extra}" if extra else "")

    def training_rows(self) -> Rows:
        c = self.config
        labelled = self._inputs(self.train)
        targets = self._targets(self.train)
        weights = np.ones(len(self.train), np.float32)
        if c.class_weights and not self.multi:
            weights = cls_data.class_weights(c.class_weights, self.train, self.labels)[targets]
        extra = [cls_data.ClassificationExample(t.text, None, t.text_b, t.source)
                 for t in self.unlabelled]
        augmented = _augment(c, [(e.text, e.text_b) for e in self.train])
        extra += [cls_data.ClassificationExample(a, None, b, "augmented") for a, b in augmented]
        parts, counts = [labelled], {"labelled": len(self.train)}
        counts["unlabelled"] = len(extra) - len(augmented)
        counts["augmented"] = len(augmented)
        if extra:
            parts.append(self._inputs(extra))
        inputs = _concat(parts)
        n_extra = len(extra)
        labels = np.concatenate([targets, np.zeros((n_extra, *targets.shape[1:]),
                                                   targets.dtype)])
        weights = np.concatenate([weights, np.zeros(n_extra, np.float32)])
        counts["rows"] = len(labels)
        logger.info("training rows: %d labelled, %d unlabelled, %d augmented",
                    counts["labelled"], counts["unlabelled"], counts["augmented"])
        return Rows(inputs, labels, weights, None, counts)

    def hard_loss(self, student: Any) -> Any:
        c = self.config
        if self.multi:
            positive = (cls_data.class_weights(c.class_weights, self.train, self.labels, True)
                        if c.class_weights else None)
            return MultiLabelCrossentropy(positive_weights=positive)
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def _logits(self, model: Any, split: str) -> np.ndarray:
        return np.asarray(model.predict(self.eval_inputs[split],
                                        batch_size=self.config.eval_batch_size, verbose=0),
                          np.float32)

    def score_splits(self, model: Any, dev: dict[str, Any] | None = None
                     ) -> dict[str, dict[str, Any]]:
        """The model's scores on dev (`dev` when given: the best epoch's) and test; a
        multi-label test at the thresholds tuned on dev."""
        out = {"dev": dev} if dev else {}
        for split in self.eval_splits:
            if split not in out:
                out[split] = self.score(model, split, self._thresholds(out.get("dev")))
        return out

    def _thresholds(self, dev: dict[str, Any] | None) -> np.ndarray | None:
        """The label thresholds tuned on dev (DEFAULT_THRESHOLD without dev); None for
        single-label data."""
        if not self.multi:
            return None
        if dev and "thresholds" in dev:
            return np.asarray([dev["thresholds"][n] for n in self.labels], np.float32)
        return np.full(len(self.labels), DEFAULT_THRESHOLD, np.float32)

    def score(self, model: Any, split: str, thresholds: np.ndarray | None = None
              ) -> dict[str, Any]:
        """Single-label: accuracy, macro-F1, loss. Multi-label: micro/macro-F1, exact match
        and loss at `thresholds`, tuned on these examples when None."""
        examples = self.dev if split == "dev" else self.test
        logits = self._logits(model, split)
        if not self.multi:
            ids = cls_data.label_ids(examples, self.labels)
            probabilities = classification_outputs.softmax(logits)
            metrics = classification_metrics(ids, probabilities.argmax(-1), self.labels)
            metrics["loss"] = classification_outputs.cross_entropy(ids, probabilities)
            return metrics
        y = cls_data.label_matrix(examples, self.labels)
        probabilities = classification_outputs.sigmoid(logits)
        if thresholds is None:
            thresholds = tune_thresholds(y, probabilities)
        metrics = multi_label_metrics(y, probabilities >= thresholds, self.labels)
        metrics["loss"] = float(MultiLabelCrossentropy()(y, logits))
        metrics["thresholds"] = dict(zip(self.labels, np.asarray(thresholds).tolist(),
                                         strict=True))
        return metrics

    def model_metadata(self, dev: dict[str, Any] | None) -> dict[str, Any]:
        out = {"task": "classification", "labels": self.labels,
               "max_seq_length": self.config.max_seq_length, "lower_case": self.lower_case,
               "pair": self.pair, "multi_label": self.multi, "long_input": "truncate"}
        if self.multi:
            out["thresholds"] = self._thresholds(dev).tolist()
        return out

    def write_predictions(self, student: Any, run: Staging, dev: dict[str, Any] | None
                          ) -> None:
        if not self.test:
            return
        logits = self._logits(student, "test")
        if self.multi:
            classification_outputs.write_multi_label_predictions(
                run.path("test_predictions.jsonl"), self.test,
                classification_outputs.sigmoid(logits), self._thresholds(dev), self.labels)
        else:
            classification_outputs.write_predictions(
                run.path("test_predictions.tsv"), self.test,
                classification_outputs.softmax(logits), self.labels)


def _augment(config: Any, texts: Sequence[tuple[str, str | None]]
             ) -> list[tuple[str, str | None]]:
    """The augmented copies of the training texts (a pair's two texts drawn independently)."""
    if not config.augment_copies:
        return []
    firsts = distill_data.augment_texts([a for a, _ in texts], config.augment_copies,
                                        config.augment_replace_prob, config.seed)
    pairs = any(b is not None for _, b in texts)
    seconds = (distill_data.augment_texts([b for _, b in texts], config.augment_copies,
                                          config.augment_replace_prob, config.seed + 1)
               if pairs else None)
    out = []
    for i, (a, b) in enumerate(texts):
        if seconds is None:
            out += [(x, None) for x in firsts[i]]
        else:
            count = max(len(firsts[i]), len(seconds[i]))
            out += [(firsts[i][j] if j < len(firsts[i]) else a,
                     seconds[i][j] if j < len(seconds[i]) else b) for j in range(count)]
    logger.info("augmentation: %d copies of %d training texts", len(out), len(texts))
    return out


# --- NER -----------------------------------------------------------------------------------------


class NerDistill:
    """An NER teacher's data, scores and outputs."""

    data_labels = None
    metric = "f1"

    def __init__(self, config: Any) -> None:
        self.config = config
        splits = registry.get("ner").load_data(config)
        self.train, self.dev, self.test = splits["train"], splits["dev"], splits["test"]
        if not self.train:
            raise UserError("distillation needs the labelled training set (train_file or "
                            "task_name)")
        self.eval_splits = [s for s, e in (("dev", self.dev), ("test", self.test)) if e]
        self.separator = self.train[0].separator
        self.unlabelled = _unlabelled_texts(config, False, _texts(splits))

    def check_teacher(self, teacher: Any, loaded: Any) -> None:
        if bool(teacher.use_crf) != bool(self.config.crf):
            raise UserError(f"teacher_dir {self.config.init_checkpoint}: crf is the teacher's "
                            f"({teacher.use_crf})")
        self.crf = teacher.use_crf

    def prepare(self, vocab_file: str, lower_case: bool, labels: list[str]) -> None:
        c = self.config
        self.labels, self.lower_case = labels, lower_case
        self.tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)
        self.doc_stride = ner_data.check_windows(c.max_seq_length, c.doc_stride, c.long_input)
        self.features = {s: self._encode(e) for s, e in (("train", self.train), ("dev", self.dev),
                                                          ("test", self.test)) if e}

    def _encode(self, examples: Sequence[Any]) -> ner_data.NerFeatures:
        c = self.config
        return ner_data.encode_examples(examples, self.tokenizer, c.max_seq_length,
                                        self.labels, long_input=c.long_input,
                                        doc_stride=self.doc_stride,
                                        label_alignment=c.label_alignment)

    @property
    def description(self) -> str:
        c = self.config
        extra = c.unlabelled_file or c.unlabelled_builtin
        return f"{c.task_name or c.train_file}" + (f" + {extra}" if extra else "")

    def _rows(self, features: ner_data.NerFeatures, labelled: bool
              ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        batch = next(iter(ner_data.make_dataset(features, max(1, len(features.input_ids)),
                                                crf=self.crf)))
        inputs = {k: v.numpy() for k, v in batch[0].items()}
        scored = (features.label_ids != ner_data.IGNORE_INDEX) & features.max_context
        labels, weights = batch[1].numpy(), batch[2].numpy()
        if not labelled:
            labels, weights = np.zeros_like(labels), np.zeros_like(weights)
        return inputs, labels, weights, scored.astype(np.float32)

    def training_rows(self) -> Rows:
        c = self.config
        texts = [t.text for t in self.unlabelled]
        augmented = [a for a, _ in _augment(c, [(e.text, None) for e in self.train])]
        parts = [self._rows(self.features["train"], labelled=True)]
        extra = texts + augmented
        if extra:
            if "O" not in self.labels:
                raise UserError(f"the teacher's tags {self.labels} have no 'O': unlabelled "
                                "sentences cannot be packed")
            examples = [self._sentence(t, i) for i, t in enumerate(extra)]
            parts.append(self._rows(self._encode(examples), labelled=False))
        inputs = _concat([p[0] for p in parts])
        labels = np.concatenate([p[1] for p in parts])
        weights = np.concatenate([p[2] for p in parts])
        mask = np.concatenate([p[3] for p in parts])
        counts = {"labelled": len(self.train), "unlabelled": len(texts),
                  "augmented": len(augmented), "rows": len(labels),
                  "labelled_windows": len(self.features["train"].input_ids)}
        logger.info("training rows: %d labelled sentences (%d windows), %d unlabelled, %d "
                    "augmented; %d windows in all", len(self.train),
                    counts["labelled_windows"], len(texts), len(augmented), len(labels))
        return Rows(inputs, labels, weights, mask, counts)

    def _sentence(self, text: str, index: int) -> Any:
        tokens = tuple(ch for ch in text if not ch.isspace()) if self.separator == "" \
            else tuple(text.split())
        return ner_data.NerExample(tokens, ("O",) * len(tokens), f"unlabelled:{index}",
                                   separator=self.separator)

    def hard_loss(self, student: Any) -> Any:
        return training_loss(student)

    def _tags(self, model: Any, split: str) -> list[list[str]]:
        features = self.features[split]
        logits = model.predict(features.inputs(), batch_size=self.config.eval_batch_size,
                               verbose=0)
        viterbi = model.decode if getattr(model, "crf", None) is not None else None
        return ner_data.decode_logits(features, np.asarray(logits), self.labels, viterbi)

    def score(self, model: Any, split: str) -> dict[str, Any]:
        examples = self.dev if split == "dev" else self.test
        return entity_metrics([e.tags for e in examples], self._tags(model, split))

    def score_splits(self, model: Any, dev: dict[str, Any] | None = None
                     ) -> dict[str, dict[str, Any]]:
        """Entity scores on dev (`dev` when given: the best epoch's) and test."""
        return {split: dev if split == "dev" and dev else self.score(model, split)
                for split in self.eval_splits}

    def model_metadata(self, dev: dict[str, Any] | None) -> dict[str, Any]:
        c = self.config
        return {"task": "ner", "labels": self.labels, "max_seq_length": c.max_seq_length,
                "lower_case": self.lower_case, "token_separator": self.separator,
                "long_input": c.long_input, "doc_stride": self.doc_stride,
                "label_alignment": c.label_alignment}

    def write_predictions(self, student: Any, run: Staging, dev: dict[str, Any] | None
                          ) -> None:
        if self.test:
            write_predictions(run.directory, self.test, self._tags(student, "test"))


KINDS = {"classification": ClassificationDistill, "ner": NerDistill}
