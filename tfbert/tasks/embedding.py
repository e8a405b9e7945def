"""Sentence embeddings end to end: contrastive fine-tuning of a `BertSentenceEncoder` and its
retrieval scores beside BM25; `run_embedding(EmbeddingConfig) -> results`, behind
run_embedding.py.

Data comes from a built-in retrieval task (`task_name`) or from files. Training files hold text
pairs: `anchor`, `positive` and optionally `negative` columns (a hard negative) for the ranking
losses (mnrl, mnrl_symmetric), or `text`, `text_b`, `score` for the scored losses (cosent,
cosine); TSV with a header row, or JSONL objects with those keys. Dev and test files of
anchor/positive pairs are scored as retrieval (each anchor is a query; the corpus is every
distinct positive of the file; its own positive is the relevant one); files of scored pairs are
scored as STS (Spearman's rho of the cosine against the score).

Built-in retrieval tasks (the built-in corpus, split train/dev/test by a stable hash):
    qa_paragraphs     the built-in QA set's question -> its paragraph, among all paragraphs of
                      the split. The question is a clause of the paragraph with one name
                      replaced by 谁 / 哪里 / 哪个机构: lexical overlap finds most of them.
    headline_lead     a People's Daily article's headline -> its first paragraph, among the
                      first paragraphs of every article of the split. A headline names its
                      story in a few words the lead paragraph often does not repeat (a
                      summary, not a quotation), so matching words finds fewer of them.

Every retrieval score (recall@1/5/10, MRR@10, nDCG@10: `tfbert.evaluation.retrieval`) is
reported for the model before training ("start"), after ("model") and for BM25 on the same
queries and corpus ("bm25"). The epoch with the best dev `best_metric` is kept; the model is
written to output_dir/model (tfbert format; `tfbert.save_pretrained(model, dir,
format="sentence-transformers")` writes sentence-transformers' layout).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfbert import textfiles
from tfbert.data import corpora, splits
from tfbert.data import length_buckets as lb
from tfbert.data.qa_builtin import builtin_qa_examples
from tfbert.errors import UserError
from tfbert.evaluation.regression import regression_metrics
from tfbert.evaluation.retrieval import bm25_rankings, retrieval_metrics, vector_rankings
from tfbert.models.contrastive import LOSSES, PAIRED, ContrastiveTrainer
from tfbert.models.sentence_encoder import POOLING_MODES, BertSentenceEncoder
from tfbert.tasks.base import Task
from tfbert.text.preprocessor import BertPreprocessor
from tfbert.training import finetune as ft
from tfbert.training.config import field
from tfbert.training.finetune import TaskConfig
from tfbert.training.outputs import Staging, save_model

logger = logging.getLogger(__name__)

BUILTIN_TASKS = ("qa_paragraphs", "headline_lead")
BEST_METRICS = ("ndcg@10", "mrr@10", "recall@1", "recall@5", "recall@10", "spearman")
RANK_COLUMNS = ("anchor", "positive", "negative")
SCORE_COLUMNS = ("text", "text_b", "score")


@dataclasses.dataclass
class EmbeddingConfig(TaskConfig):
    """One embedding run (the flags of run_embedding.py; TaskConfig has the shared fields).

    Args:
        task_name: str or None. A built-in retrieval task (BUILTIN_TASKS), the default when no
            file is given.
        train_file, dev_file, test_file: str or None. Pair files (module docstring).
        loss: str. mnrl (default), mnrl_symmetric, cosent or cosine
            (`tfbert.models.contrastive`).
        scale: float. Cosine similarity scale of mnrl and cosent (sentence-transformers' 20).
        pooling: str or None. mean, cls, max or mean_sqrt_len for a checkpoint without a
            sentence-transformers pooling; None: the checkpoint's own, else mean.
        normalize: bool or None. L2-normalise the embeddings; None: the checkpoint's own,
            else True.
        best_metric: str. Dev metric that picks the epoch kept (ndcg@10; spearman for scored
            pairs).
    """

    task_name: str | None = None
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    loss: str = field("mnrl", choices=list(LOSSES))
    scale: float = field(20.0, greater_than=0)
    pooling: str | None = None
    normalize: bool | None = None
    best_metric: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        files = self.train_file or self.dev_file or self.test_file
        if self.task_name and files:
            raise UserError("give one data source: task_name or train_file/dev_file/test_file")
        if self.task_name and self.task_name not in BUILTIN_TASKS:
            raise UserError(f"unknown task_name {self.task_name!r}; built-in retrieval tasks: "
                            f"{BUILTIN_TASKS}")
        if self.task_name and self.loss in PAIRED:
            raise UserError(f"loss {self.loss!r} needs scored pairs (text, text_b, score "
                            f"files); the built-in {self.task_name} has query-passage pairs")
        if self.pooling is not None and self.pooling not in POOLING_MODES:
            raise UserError(f"pooling must be one of {POOLING_MODES}, got {self.pooling!r}")
        self.best_metric = self.best_metric or ("spearman" if self.loss in PAIRED
                                                else "ndcg@10")
        if self.best_metric not in BEST_METRICS:
            raise UserError(f"best_metric must be one of {BEST_METRICS}, got "
                            f"{self.best_metric!r}")


# --- data -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pairs:
    """A split's text pairs: ranking pairs (anchors, positives[, negatives]) or scored pairs
    (anchors = text, positives = text_b, scores)."""

    anchors: list[str]
    positives: list[str]
    negatives: list[str] | None = None
    scores: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.anchors)

    def head(self, n: int | None) -> Pairs:
        if not n:
            return self
        return Pairs(self.anchors[:n], self.positives[:n],
                     None if self.negatives is None else self.negatives[:n],
                     None if self.scores is None else self.scores[:n])


def read_pairs(path: str, encoding: str = textfiles.DEFAULT_ENCODING) -> Pairs:
    """A TSV (header row) or JSONL file of ranking or scored pairs (module docstring).

    Raises:
        UserError: a missing column, an empty text or a score that is not a finite number,
            naming the file and line.
    """
    textfiles.check_file(path, "pairs file")
    rows = []
    if path.endswith((".jsonl", ".json")):
        for line_number, line in enumerate(textfiles.read_lines(path, encoding), 1):
            if line.strip():
                try:
                    rows.append((line_number, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}:{line_number}: not a JSON object ({e.msg})") from None
    else:
        header: list[str] | None = None
        for line_number, fields in textfiles.tsv_rows(path, encoding):
            if not any(f.strip() for f in fields):
                continue
            if header is None:
                header = [f.strip() for f in fields]
            else:
                rows.append((line_number, dict(zip(header, fields, strict=False))))
    if not rows:
        raise UserError(f"{path}: no pairs")
    keys = set(rows[0][1])
    columns = (RANK_COLUMNS if {"anchor", "positive"} <= keys
               else SCORE_COLUMNS if set(SCORE_COLUMNS) <= keys else None)
    if columns is None:
        raise UserError(f"{path}: columns {sorted(keys)}; expected anchor, positive (and "
                        "negative) or text, text_b, score")
    used = [c for c in columns if c in keys]
    values: dict[str, list[Any]] = {c: [] for c in used}
    for line_number, row in rows:
        for column in used:
            value = row.get(column)
            if column == "score":
                value = _score(value, f"{path}:{line_number}")
            elif not isinstance(value, str) or not value.strip():
                raise UserError(f"{path}:{line_number}: {column} is missing or empty")
            values[column].append(value)
    if columns == SCORE_COLUMNS:
        return Pairs(values["text"], values["text_b"],
                     scores=np.asarray(values["score"], np.float32))
    return Pairs(values["anchor"], values["positive"], values.get("negative"))


def _score(value: Any, source: str) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError):
        score = math.nan
    if not math.isfinite(score) or isinstance(value, bool):
        raise UserError(f"{source}: score {value!r} is not a finite number")
    return score


def builtin_pairs(task_name: str, split: str) -> Pairs:
    """The (query, relevant passage) pairs of a built-in retrieval task's split."""
    if task_name == "qa_paragraphs":
        examples = builtin_qa_examples(split)
        return Pairs([e.question for e in examples], [e.context for e in examples])
    line_splits = splits.people_daily_line_splits()
    pairs = [(h, lead) for h, lead, line in _headline_leads() if line_splits[line] == split]
    return Pairs([h for h, _ in pairs], [lead for _, lead in pairs])


def _headline_leads() -> list[tuple[str, str, int]]:
    """(headline, first paragraph, its line index) of each People's Daily article. An article
    starts at a run of lines without sentence-final punctuation (title, subtitle, byline:
    `corpora.people_daily_article_heads`); its headline is the first line of the run of 4-40
    characters that holds no 。！？!? and does not open with a bracket (a photo credit such as
    （新华社记者某某摄） is not one), its lead the first line after the run. Articles without
    such a headline, with a lead under 20 characters, or repeating an earlier headline are
    left out. The pair is in its lead's split, which is its headline's (`tfbert.data.splits`)."""
    out, seen = [], set()
    lines = corpora.people_daily_lines()
    for run, lead in corpora.people_daily_article_heads():
        headline = next((lines[h] for h in run if 4 <= len(lines[h]) <= 40
                         and not lines[h].startswith(("（", "("))
                         and not any(c in lines[h] for c in "。！？!?")), None)
        if headline and len(lines[lead]) >= 20 and headline not in seen:
            seen.add(headline)
            out.append((headline, lines[lead], lead))
    return out


def retrieval_set(pairs: Pairs) -> tuple[list[str], list[str], list[set[int]]]:
    """(queries, corpus, relevant): the corpus is the distinct positives in order of first
    appearance; each query's relevant set is its positive's index."""
    corpus: dict[str, int] = {}
    for text in pairs.positives:
        corpus.setdefault(text, len(corpus))
    return pairs.anchors, list(corpus), [{corpus[p]} for p in pairs.positives]


def load_data(config: EmbeddingConfig) -> dict[str, Pairs | None]:
    """The train/dev/test pairs the run needs (None where not given or not needed)."""
    needed = {"train": config.do_train, "dev": config.do_eval or config.do_train,
              "test": config.do_predict}
    files = {"train": config.train_file, "dev": config.dev_file, "test": config.test_file}
    task_name = config.task_name or (None if any(files.values()) else BUILTIN_TASKS[0])
    out: dict[str, Pairs | None] = {}
    for split, wanted in needed.items():
        pairs = None
        if wanted and task_name:
            pairs = builtin_pairs(task_name, split)
        elif wanted and files[split]:
            pairs = read_pairs(files[split], config.input_encoding)
        limit = config.max_train_examples if split == "train" else config.max_eval_examples
        out[split] = pairs.head(limit) if pairs else None
    train = out["train"]
    if train is not None and (train.scores is not None) != (config.loss in PAIRED):
        kind = ("scored pairs (text, text_b, score)" if config.loss in PAIRED
                else "anchor, positive pairs")
        raise UserError(f"loss {config.loss!r} trains on {kind}; "
                        f"{config.train_file or task_name} holds the other kind")
    return out


class _Embedder:
    """Texts -> embeddings [N, D] float32 through the preprocessor and a model, in batches
    (with `length_buckets`, batches of one length bucket each: `tfbert.data.length_buckets`)."""

    def __init__(self, preprocessor: BertPreprocessor, batch_size: int,
                 length_buckets: bool = False) -> None:
        self.preprocessor, self.batch_size = preprocessor, batch_size
        self.length_buckets = length_buckets

    def dataset(self, *columns: Sequence[str], shuffle: bool = False, seed: int = 0,
                scores: np.ndarray | None = None) -> Any:
        """Batches of one input dict (one column), or of {"anchor", "positive"[, "negative"]}
        dicts (with the scores as targets when given). With length buckets the texts are
        packed once (cached), a pair's length is its longest text's, and without shuffle each
        input dict carries `example_index`."""
        names = RANK_COLUMNS[:len(columns)]
        element: dict[str, Any] = {"texts": tuple(tf.constant(list(c)) for c in columns)}
        if scores is not None:
            element["y"] = tf.constant(scores, tf.float32)
        ds = tf.data.Dataset.from_tensor_slices(element)
        if shuffle and not self.length_buckets:
            ds = ds.shuffle(len(columns[0]), seed=seed, reshuffle_each_iteration=True)
        ds = ds.batch(self.batch_size)

        def pack(batch: dict[str, Any]) -> Any:
            texts = batch["texts"]
            if len(columns) == 1:
                return self.preprocessor(texts[0])
            x = {name: self.preprocessor(t) for name, t in zip(names, texts, strict=True)}
            return (x, batch["y"]) if "y" in batch else x

        ds = ds.map(pack, num_parallel_calls=tf.data.AUTOTUNE)
        if not self.length_buckets:
            return ds.prefetch(tf.data.AUTOTUNE)
        ds = ds.unbatch().apply(tf.data.experimental.assert_cardinality(len(columns[0])))
        ds = ds.cache()
        return lb.batch_by_length(ds, self.batch_size, lb.packed_length(ds), shuffle=shuffle,
                                  seed=seed)

    def embed(self, model: Any, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(lb.predict_in_order(model, self.dataset(texts)), np.float32)


def evaluate(model: Any, embedder: _Embedder, pairs: Pairs) -> dict[str, Any]:
    """Retrieval scores of ranking pairs, or STS Spearman (and Pearson) of scored pairs."""
    if pairs.scores is not None:
        a, b = embedder.embed(model, pairs.anchors), embedder.embed(model, pairs.positives)
        cos = np.sum(a * b, -1) / np.maximum(np.linalg.norm(a, axis=-1)
                                             * np.linalg.norm(b, axis=-1), 1e-12)
        scores = regression_metrics(pairs.scores, cos)
        return {"spearman": scores["spearman"], "pearson": scores["pearson"],
                "num_examples": scores["num_examples"]}
    queries, corpus, relevant = retrieval_set(pairs)
    ranked = vector_rankings(embedder.embed(model, queries), embedder.embed(model, corpus))
    return {**retrieval_metrics(ranked, relevant), "corpus_size": len(corpus)}


def bm25_scores(pairs: Pairs) -> dict[str, Any] | None:
    """BM25's retrieval scores on the same queries and corpus (None for scored pairs)."""
    if pairs.scores is not None:
        return None
    queries, corpus, relevant = retrieval_set(pairs)
    return {**retrieval_metrics(bm25_rankings(queries, corpus), relevant),
            "corpus_size": len(corpus)}


def run_embedding(config: EmbeddingConfig) -> dict[str, Any]:
    """Fine-tunes and/or scores a BertSentenceEncoder as `config` says; returns results.json.

    Example:
    >>> results = run_embedding(EmbeddingConfig(  # doctest: +SKIP
    ...     output_dir="out/embedding", task_name="qa_paragraphs",
    ...     init_checkpoint="output/pretrain_default/model"))
    >>> test = results["test"]  # doctest: +SKIP
    >>> test["model"]["recall@10"], test["bm25"]["recall@10"]  # doctest: +SKIP
    """
    with ft.task_run(config, "embedding") as run:
        return _run(config, run)


def _run(config: EmbeddingConfig, run: Staging) -> dict[str, Any]:
    keras.utils.set_random_seed(config.seed)
    splits = load_data(config)
    train, dev, test = splits["train"], splits["dev"], splits["test"]
    if config.do_train and not train:
        raise UserError("do_train needs training pairs (train_file or task_name)")
    head = {k: v for k, v in (("pooling", config.pooling), ("normalize", config.normalize))
            if v is not None}
    global_step = 0
    if config.do_train:
        model, vocab_file, lower_case = ft.build_model(BertSentenceEncoder, config, **head)
    else:
        loaded = ft.load_finetuned(config, "embedding", labelled=False)
        model, vocab_file, lower_case = loaded.model, loaded.vocab_file, loaded.lower_case
        global_step = loaded.global_step
    ft.check_seq_length(config, model)
    embedder = _Embedder(BertPreprocessor(vocab_file, config.max_seq_length,
                                          lower_case=lower_case), config.eval_batch_size,
                         config.length_buckets)
    results: dict[str, Any] = {"loss": config.loss, "run_id": run.run_id,
                               "global_step": global_step}
    for split, pairs in (("dev", dev), ("test", test)):
        if pairs:
            results[split] = {"start": evaluate(model, embedder, pairs),
                              "bm25": bm25_scores(pairs)}
    if config.do_train:
        with model.distribute_strategy.scope():
            trainer = ContrastiveTrainer(model, loss=config.loss, scale=config.scale)
        columns = [train.anchors, train.positives] + ([train.negatives] if train.negatives
                                                      else [])
        # Training batches are not length-bucketed: a batch is the contrastive loss's set of
        # candidates, and grouping texts by length would change which negatives each anchor
        # sees (not only the padding). Scoring dev and test is bucketed (same vectors).
        train_ds = _Embedder(embedder.preprocessor, config.micro_batch_size).dataset(
            *columns, shuffle=True, seed=config.seed, scores=train.scores)
        outcome = ft.finetune(
            trainer, train_ds, loss=None,
            config=config.finetune_config(config.best_metric, log_dir=run.path("logs")),
            evaluate_fn=(lambda t: evaluate(t.embedder, embedder, dev)) if dev else None)
        results["train"] = {"learning_rate": config.learning_rate, "num_examples": len(train),
                            "best_epoch": outcome.best_epoch,
                            "num_train_steps": outcome.num_train_steps,
                            "stopped_epoch": outcome.stopped_epoch, "history": outcome.history}
        save_model(model, run.path("model"), vocab_file=vocab_file,
                   metadata={"task": "embedding", "max_seq_length": config.max_seq_length,
                             "lower_case": lower_case, "run_id": run.run_id})
    for split, pairs in (("dev", dev), ("test", test)):
        if pairs:
            results[split]["model"] = evaluate(model, embedder, pairs)
            logger.info("%s: %s", split, {k: v.get(config.best_metric) for k, v in
                                          results[split].items() if isinstance(v, dict)})
    ft.write_results(run.directory, results)
    return results


TASK = Task("embedding", BertSentenceEncoder, export="embedding", command="embedding",
            config_class=EmbeddingConfig, run=run_embedding)
