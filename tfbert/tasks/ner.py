"""Named-entity recognition end to end: `run_ner(NerConfig) -> results`, behind run_ner.py.

Data: CoNLL-style files (token<TAB>tag, BIO or BIOES) or the built-in People's Daily NER
(`task_name="people_daily"`, character-level BIO, PER/LOC/ORG). The run fine-tunes a
BertTokenClassifier (labels on each token's first word piece, or on all of its pieces;
optionally with a CRF head), keeps the epoch with the best dev entity F1, and writes to
output_dir:

    results.json            {"dev": {"precision", "recall", "f1", "per_type", ...},
                             "test": {...}, "train": {...}, "labels": [...],
                             "data": {split: NerFeatures.stats: windows, long sentences,
                                      tokens without a prediction, ...}}
    test_predictions.jsonl  one sentence per line: text, predicted entities with character
                            offsets (start, end exclusive), gold entities
    test_predictions.conll  token, gold tag, predicted tag (conlleval's input format)
    model/                  the fine-tuned model (metadata task "ner", labels, max_seq_length,
                            lower_case, token_separator, long_input, doc_stride,
                            label_alignment, run_id)
    logs/                   TensorBoard
    tfbert_run.json         the manifest naming the run these outputs come from (written last:
                            the outputs are staged and committed together, `ft.task_run`)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from tfbert.data import length_buckets as lb
from tfbert.data import ner as data
from tfbert.errors import UserError
from tfbert.evaluation.ner import entity_metrics, write_predictions
from tfbert.models.token_classifier import BertTokenClassifier, training_loss
from tfbert.tasks.base import Task
from tfbert.text.tokenizer import BertTokenizer
from tfbert.training import finetune as ft
from tfbert.training.config import field
from tfbert.training.finetune import TaskConfig
from tfbert.training.outputs import Staging, save_model

logger = logging.getLogger(__name__)

BUILTIN_TASKS = ("people_daily",)


@dataclasses.dataclass
class NerConfig(TaskConfig):
    """One NER run (the flags of run_ner.py); TaskConfig has the shared fields (checkpoint,
    batch sizes, epochs, learning rate, do_train/do_eval/do_predict, ...).

    A sentence longer than max_seq_length - 2 word pieces is read as overlapping windows
    (long_input "windows", every window a training example) and each piece is predicted from
    the window where it has the most context, so every token gets a prediction; "truncate"
    cuts it instead. results.json counts both under "data".

    Args:
        task_name: str or None. Built-in data: "people_daily".
        train_file, dev_file, test_file: str or None. CoNLL-style files.
        char_level: bool. The files hold one character per line of text written without spaces
            (Chinese): tokens join with "" instead of " ".
        dropout: float. Dropout before the tagging layer.
        long_input: str. "windows" or "truncate" (see above).
        doc_stride: int or None. Pieces between window starts, in [1, max_seq_length - 2);
            default max_seq_length // 2.
        label_alignment: str. "first": train on each token's first word piece; "all": on
            every piece (tfbert.data.ner.encode_examples). Predictions read the first piece.
        crf: bool. A linear-chain CRF head (trained with its negative log-likelihood, decoded
            by Viterbi). Eval-only runs take it from the saved model.
    """

    task_name: str | None = None
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    char_level: bool = False
    dropout: float = field(0.1, lower_bound=0, less_than=1)
    long_input: str = "windows"
    doc_stride: int | None = None
    label_alignment: str = "first"
    crf: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        data.check_windows(self.max_seq_length, self.doc_stride, self.long_input,
                           self.label_alignment)
        files = self.train_file or self.dev_file or self.test_file
        if bool(self.task_name) == bool(files):
            raise UserError("give exactly one data source: task_name or "
                            "train_file/dev_file/test_file")
        if self.task_name and self.task_name not in BUILTIN_TASKS:
            raise UserError(f"unknown NER task {self.task_name!r}; built-in: {BUILTIN_TASKS}")


def load_data(config: NerConfig) -> dict[str, list[data.NerExample] | None]:
    """The train/dev/test sentences the run needs (None where not given or not needed)."""
    needed = {"train": config.do_train, "dev": config.do_train or config.do_eval,
              "test": config.do_predict}
    files = {"train": config.train_file, "dev": config.dev_file, "test": config.test_file}
    splits: dict[str, list[data.NerExample] | None] = {}
    for split in ("train", "dev", "test"):
        examples = None
        if needed[split] and config.task_name:
            examples = data.people_daily_ner(split)
        elif needed[split] and files[split]:
            examples = data.read_conll(files[split], separator="" if config.char_level else " ",
                                       encoding=config.input_encoding)
            data.check_char_level(examples, files[split], config.char_level)
        splits[split] = config.limit(examples, split)
    return splits


def run_ner(config: NerConfig) -> dict[str, Any]:
    """Fine-tunes and/or evaluates a BertTokenClassifier as `config` says; returns results.json.

    Example:
    >>> results = run_ner(NerConfig(  # doctest: +SKIP
    ...     output_dir="out/ner", task_name="people_daily",
    ...     init_checkpoint="output/pretrain_default/model"))
    >>> results["test"]["f1"]  # doctest: +SKIP
    """
    with ft.task_run(config, "ner") as run:
        return _run(config, run)


def _run(config: NerConfig, run: Staging) -> dict[str, Any]:
    keras.utils.set_random_seed(config.seed)
    splits = load_data(config)
    train, dev, test = splits["train"], splits["dev"], splits["test"]
    if config.do_train and not train:
        raise UserError("do_train needs training data (train_file or task_name)")
    if config.do_predict and not test:
        raise UserError("do_predict needs test data (test_file or task_name)")

    if config.do_train:
        labels = (list(data.PEOPLE_DAILY_LABELS) if config.task_name
                  else data.label_list(train, config.label_alignment))
        model, vocab_file, lower_case = ft.build_model(
            BertTokenClassifier, config, num_classes=len(labels), dropout=config.dropout,
            crf=config.crf)
    else:
        loaded = ft.load_finetuned(config, "ner")
        model, labels, vocab_file, lower_case = (loaded.model, loaded.labels,
                                                 loaded.vocab_file, loaded.lower_case)
    ft.check_seq_length(config, model)
    tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)
    logger.info("labels: %s", labels)

    doc_stride = data.check_windows(config.max_seq_length, config.doc_stride, config.long_input)
    results: dict[str, Any] = {"labels": labels, "data": {}, "run_id": run.run_id}
    features = {}
    for split, examples in splits.items():  # unknown tags fail here, before any training
        if examples:
            features[split] = data.encode_examples(
                examples, tokenizer, config.max_seq_length, labels,
                long_input=config.long_input, doc_stride=doc_stride,
                label_alignment=config.label_alignment)
            results["data"][split] = features[split].stats
            _log_stats(split, features[split].stats)

    def score(split: str) -> tuple[dict[str, Any], list[list[str]]]:
        tags = predict_tags(model, features[split], labels, config.eval_batch_size,
                            length_buckets=config.length_buckets)
        return entity_metrics([e.tags for e in splits[split]], tags), tags

    if config.do_train:
        crf = model.crf is not None
        train_ds = data.make_dataset(features["train"], config.micro_batch_size,
                                     shuffle=True, seed=config.seed, crf=crf,
                                     length_buckets=config.length_buckets)
        outcome = ft.finetune(
            model, train_ds, loss=training_loss(model),
            config=config.finetune_config("f1", log_dir=run.path("logs")),
            evaluate_fn=(lambda m: score("dev")[0]) if dev else None)
        results["train"] = {"num_examples": len(train), "learning_rate": config.learning_rate,
                            "num_windows": len(features["train"].input_ids),
                            "best_epoch": outcome.best_epoch,
                            "num_train_steps": outcome.num_train_steps,
                            "stopped_epoch": outcome.stopped_epoch,
                            "history": outcome.history}
        if outcome.best_metrics:
            results["dev"] = outcome.best_metrics
        save_model(model, run.path("model"), vocab_file=vocab_file,
                   metadata={"task": "ner", "labels": labels,
                             "max_seq_length": config.max_seq_length,
                             "lower_case": lower_case,
                             "token_separator": train[0].separator,
                             "long_input": config.long_input, "doc_stride": doc_stride,
                             "label_alignment": config.label_alignment,
                             "run_id": run.run_id})
    if config.do_eval and dev and "dev" not in results:
        results["dev"] = score("dev")[0]
    if config.do_predict:
        results["test"], tags = score("test")
        write_predictions(run.directory, test, tags)
    for split in ("dev", "test"):
        if split in results:
            r = results[split]
            logger.info("%s: entity precision %.4f, recall %.4f, F1 %.4f", split,
                        r["precision"], r["recall"], r["f1"])
    ft.write_results(run.directory, results)
    return results


def _log_stats(split: str, stats: dict[str, int]) -> None:
    logger.info("%s: %d sentences in %d windows (%d longer than one window); %d tokens "
                "without a prediction", split, stats["examples"], stats["windows"],
                stats["long_examples"], stats["unpredicted_tokens"])
    if stats["truncated_examples"]:
        logger.warning("%s: %d of %d sentences are longer than max_seq_length and were cut; "
                       "%d gold entities lie (partly) beyond the cut and count as missed",
                       split, stats["truncated_examples"], stats["examples"],
                       stats["truncated_entities"])
    if stats["uncovered_tokens"] or stats["lost_tokens"]:
        logger.warning("%s: %d tokens share a word piece with the token before them (they take "
                       "its tag) and %d tokens have no word piece at all (tagged O)", split,
                       stats["uncovered_tokens"], stats["lost_tokens"])


def predict_tags(model: Any, features: data.NerFeatures, labels: Sequence[str],
                 batch_size: int, length_buckets: bool = False) -> list[list[str]]:
    """Token-level predicted tags of every sentence: each piece from its max-context window,
    Viterbi over each whole sentence for a CRF model (`data.decode_logits`). With
    `length_buckets` (False: the library default) the windows run in batches cut to their
    bucket's length, and their logits come back in order and padded to max_seq_length
    (`tfbert.data.length_buckets.predict_in_order`)."""
    ds = data.make_dataset(features, batch_size, length_buckets=length_buckets)
    logits = lb.predict_in_order(model, ds, per_token=True,
                                 max_seq_length=features.input_ids.shape[1])  # [W, T, C]
    viterbi = model.decode if getattr(model, "crf", None) is not None else None
    return data.decode_logits(features, np.asarray(logits), labels, viterbi)


TASK = Task("ner", BertTokenClassifier, export="ner", command="ner", config_class=NerConfig,
            run=run_ner, load_data=load_data)
