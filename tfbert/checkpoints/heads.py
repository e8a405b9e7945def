"""Fine-tuned task heads under Google's and Hugging Face's names, and tfbert's.

tfbert keeps a task model's head as `head.<Keras variable path>` in Keras layout (a kernel is
[H, C]). google-research/bert's run_classifier.py and run_squad.py, and transformers'
`BertFor...` classes, keep the same single linear layer under their own names with the weight
[C, H] (the transpose):

    tfbert model           Google TF1                          Hugging Face (`architectures`)
    BertClassifier         output_weights [C, H]               classifier.weight [C, H], .bias
      head_hidden_layers=0 output_bias [C]                     BertForSequenceClassification
    BertTokenClassifier    (no Google head)                    classifier.weight [C, H], .bias
                                                               BertForTokenClassification
    BertSpanLabeler        cls/squad/output_weights [2, H]     qa_outputs.weight [2, H], .bias
                           cls/squad/output_bias [2]           BertForQuestionAnswering
                           (row 0 start, row 1 end, in all three)
    BertRegressor          (no Google head)                    classifier.weight [1, H], .bias
                                                               BertForSequenceClassification
                                                               problem_type "regression"

transformers tells its two BertForSequenceClassification heads apart by `problem_type`, and
without one by num_labels (1: regression); so does `from_hf`.

Readers turn a recognised head into `head.*` weights plus tfbert.json-like entries
(`model_class`, `model_config`, `task`, and `labels` where the format has names: HF's
`id2label`), which `tfbert.models.weights` loads like a saved tfbert head. Writers go the other
way and refuse, naming the option at fault, a head the format has no names for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tfbert.checkpoints.canonical import CheckpointError, as_float32
from tfbert.checkpoints.names import HEAD_PREFIX

# HF's BertForTokenClassification and BertForQuestionAnswering have no pooler.
POOLER = ("pooler.dense.weight", "pooler.dense.bias")


@dataclasses.dataclass(frozen=True)
class HeadFormat:
    """One tfbert task head and its names in the other formats.

    Args:
        model_class: str. The tfbert model class (tfbert.json's "model_class").
        task: str. Its task in `tfbert.tasks.registry`.
        layer: str. The Keras name of its output Dense layer.
        google: str or None. Google's variable prefix ("" for run_classifier's top-level
            `output_weights`), None when Google's code has no such head.
        architecture: str. transformers' class (config.json "architectures").
        hf_prefix: str. The state-dict prefix of its Linear layer.
        sequence: bool. Reads `sequence_output` (HF's class then has no pooler).
        problem_type: str or None. transformers' `problem_type` of this head, where its class
            has several ("single_label_classification", "regression").
        classes: bool. The head's outputs are named classes or tags (num_classes in the model
            config, label names in HF's id2label).
        dropout: bool. The head has a dropout rate (HF's classifier_dropout).
        rows: int or None. The number of outputs the head must have (None: any).
    """

    model_class: str
    task: str
    layer: str
    google: str | None
    architecture: str
    hf_prefix: str
    sequence: bool
    problem_type: str | None = None
    classes: bool = True
    dropout: bool = True
    rows: int | None = None

    @property
    def kernel(self) -> str:
        return f"{HEAD_PREFIX}{self.layer}.kernel"

    @property
    def bias(self) -> str:
        return f"{HEAD_PREFIX}{self.layer}.bias"


HEADS = (
    HeadFormat("BertClassifier", "classification", "logits", "", "BertForSequenceClassification",
               "classifier", sequence=False, problem_type="single_label_classification"),
    HeadFormat("BertTokenClassifier", "ner", "logits", None, "BertForTokenClassification",
               "classifier", sequence=True),
    HeadFormat("BertSpanLabeler", "qa", "span_logits", "cls/squad/", "BertForQuestionAnswering",
               "qa_outputs", sequence=True, classes=False, dropout=False, rows=2),
    HeadFormat("BertRegressor", "regression", "score", None, "BertForSequenceClassification",
               "classifier", sequence=False, problem_type="regression", classes=False, rows=1),
)
_BY_CLASS = {h.model_class: h for h in HEADS}


def by_class(model_class: str | None) -> HeadFormat | None:
    return _BY_CLASS.get(model_class or "")


def _entries(head: HeadFormat, weight: np.ndarray, bias: np.ndarray,
             labels: list[str] | None, model_config: dict[str, Any]) -> tuple[dict, dict]:
    weights = {head.kernel: np.ascontiguousarray(weight.T), head.bias: bias}
    if head.classes:
        model_config = {"num_classes": int(weight.shape[0]), **model_config}
    metadata: dict[str, Any] = {"model_class": head.model_class, "model_config": model_config,
                                "task": head.task}
    if labels is not None:
        metadata["labels"] = labels
    return weights, metadata


def _pair(values: dict[str, np.ndarray], weight: str, bias: str,
          source: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(weight [C, H], bias [C]) popped from `values`, None when neither is there."""
    if weight not in values and bias not in values:
        return None
    if weight not in values or bias not in values:
        raise CheckpointError(f"{source}: has {weight if weight in values else bias} without "
                              f"{bias if weight in values else weight}")
    w, b = as_float32(weight, values.pop(weight), source), as_float32(bias, values.pop(bias),
                                                                      source)
    if w.ndim != 2 or b.shape != (w.shape[0],):
        raise CheckpointError(f"{source}: {weight} {tuple(w.shape)} and {bias} "
                              f"{tuple(b.shape)} are not a [C, H] weight and a [C] bias")
    return w, b


# --- Google ---------------------------------------------------------------------------------


def from_google(weights: dict[str, np.ndarray], source: str) -> dict[str, Any] | None:
    """Moves run_classifier's / run_squad's head in `weights` (Google names, as read) to
    tfbert's `head.*` names; returns its tfbert.json-like entries, or None without a head.
    Google checkpoints carry no label names."""
    found = []
    for head in HEADS:
        if head.google is None:
            continue
        pair = _pair(weights, f"{head.google}output_weights", f"{head.google}output_bias", source)
        if pair is not None:
            found.append(_entries(head, *pair, labels=None, model_config={}))
    if len(found) > 1:
        raise CheckpointError(f"{source}: holds both run_classifier's output_weights and "
                              "run_squad's cls/squad/output_weights; expected one task head")
    if not found:
        return None
    head_weights, metadata = found[0]
    weights.update(head_weights)
    return metadata


def to_google(weights: dict[str, np.ndarray], model_info: dict[str, Any] | None,
              source: str) -> dict[str, np.ndarray]:
    """The task head of `weights` under Google's names ({} without one).

    Raises:
        CheckpointError: the head is one Google's code has no names for.
    """
    saved = sorted(k for k in weights if k.startswith(HEAD_PREFIX))
    if not saved:
        return {}
    head = _expressible(weights, model_info, "google", source)
    if head.google is None:
        raise CheckpointError(
            f"{source}: google-research/bert has no {head.model_class} head (its "
            "run_classifier.py and run_squad.py know a sequence classifier and a span head); "
            "save it with format='hf' or 'tfbert'")
    return {f"{head.google}output_weights": np.ascontiguousarray(weights[head.kernel].T),
            f"{head.google}output_bias": weights[head.bias]}


def _expressible(weights: dict[str, np.ndarray], model_info: dict[str, Any] | None, fmt: str,
                 source: str) -> HeadFormat:
    saved = sorted(k for k in weights if k.startswith(HEAD_PREFIX))
    model_class = (model_info or {}).get("model_class")
    head = by_class(model_class)
    if head is None:
        raise CheckpointError(f"{source}: format {fmt!r} has no names for the head of a "
                              f"{model_class or 'model of unknown class'} ({', '.join(saved)}); "
                              "save it with format='tfbert'")
    hidden = (model_info or {}).get("model_config", {}).get("head_hidden_layers", 0)
    if hidden:
        raise CheckpointError(
            f"{source}: BertClassifier with head_hidden_layers={hidden} has hidden head layers "
            f"that format {fmt!r} cannot hold (its classifier is one linear layer on the "
            "pooled output); save it with format='tfbert', or fine-tune with "
            "head_hidden_layers=0")
    extra = sorted(set(saved) - {head.kernel, head.bias})
    if extra:
        raise CheckpointError(f"{source}: {head.model_class} head has weights format {fmt!r} "
                              f"cannot hold: {', '.join(extra)}; save it with format='tfbert'")
    return head


# --- Hugging Face ---------------------------------------------------------------------------


def from_hf(state: dict[str, Any], values: dict[str, Any], source: str
            ) -> dict[str, Any] | None:
    """Moves the head of a transformers `BertFor...` state dict (config.json `architectures`
    names the class) to tfbert's `head.*` names; returns its tfbert.json-like entries (labels
    from `id2label`), or None when config.json names no head tfbert knows.

    Raises:
        CheckpointError: a head tfbert's models cannot run the same way (multi-label or
            regression `problem_type`), or a head with missing weights.
    """
    names = [a for a in values.get("architectures") or [] if any(a == h.architecture
                                                                    for h in HEADS)]
    if not names:
        return None
    heads = [h for h in HEADS if h.architecture == names[0]]
    head = heads[0]
    if len(heads) > 1:  # transformers' rule: problem_type, else regression for num_labels=1
        problem = values.get("problem_type")
        num_labels = len(values.get("id2label") or {}) or values.get("num_labels", 2)
        problem = problem or ("regression" if num_labels == 1 else "single_label_classification")
        head = next((h for h in heads if h.problem_type == problem), None)
        if head is None:
            raise CheckpointError(
                f"{source}: {names[0]} with problem_type {problem!r}; tfbert runs its "
                f"{', '.join(repr(h.problem_type) for h in heads)} heads "
                f"({', '.join(h.model_class for h in heads)}), not this one")
    prefix = head.hf_prefix
    keys = {f"{prefix}.weight", f"{prefix}.bias"}
    pair = _pair(state, f"{prefix}.weight", f"{prefix}.bias", source)
    if pair is None:
        raise CheckpointError(f"{source}: config.json names {head.architecture} but the weights "
                              f"have no {' / '.join(sorted(keys))}")
    if head.rows is not None and len(pair[0]) != head.rows:
        raise CheckpointError(f"{source}: {head.architecture} (problem_type "
                              f"{head.problem_type!r}) with {len(pair[0])} outputs; tfbert's "
                              f"{head.model_class} has {head.rows}")
    labels = None
    if head.classes:
        id2label = values.get("id2label") or {}
        labels = [str(id2label.get(str(i), id2label.get(i, i))) for i in range(len(pair[0]))]
    config: dict[str, Any] = {}
    dropout = values.get("classifier_dropout")
    if head.dropout:
        dropout = values.get("hidden_dropout_prob", 0.1) if dropout is None else dropout
        config["dropout"] = float(dropout)
    head_weights, metadata = _entries(head, *pair, labels=labels, model_config=config)
    state.update(head_weights)
    return metadata


def to_hf(weights: dict[str, np.ndarray], model_info: dict[str, Any] | None,
          labels: list[str] | None, source: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(state-dict entries, config.json entries) of the task head in `weights` for
    transformers' `BertFor...` class; ({}, {}) without a head.

    Raises:
        CheckpointError: a head HF's BERT classes cannot hold, or labels of the wrong count.
    """
    if not any(k.startswith(HEAD_PREFIX) for k in weights):
        return {}, {}
    head = _expressible(weights, model_info, "hf", source)
    weight = np.ascontiguousarray(weights[head.kernel].T)
    state = {f"{head.hf_prefix}.weight": weight, f"{head.hf_prefix}.bias": weights[head.bias]}
    config: dict[str, Any] = {"architectures": [head.architecture]}
    if head.dropout:  # transformers' label entries go with its classifier heads
        count = weight.shape[0]
        labels = (list(labels) if labels and head.classes
                  else [f"LABEL_{i}" for i in range(count)])
        if len(labels) != count:
            raise CheckpointError(f"{source}: {len(labels)} labels for a head with "
                                  f"{count} classes")
        dropout = (model_info or {}).get("model_config", {}).get("dropout")
        config.update(id2label={str(i): str(name) for i, name in enumerate(labels)},
                      label2id={str(name): i for i, name in enumerate(labels)},
                      num_labels=count, classifier_dropout=dropout)
    if head.problem_type:
        config["problem_type"] = head.problem_type
    return state, config
