"""`run`: the probe from a checkpoint to probe.json, probe.md and the PNGs in output_dir.

Order: refuse bad input (output_dir, model, --attention text) before anything is written;
features of every layer of the model and of a random-init copy (one forward pass per batch);
one probe per task, layer and kind (model, random init, control task); the attention
statistics; then all outputs committed together (`tfbert.training.outputs`: output_dir holds
one complete probe run, and a rerun replaces it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfbert import ownership
from tfbert.errors import UserError
from tfbert.fileio import write_json, write_text
from tfbert.probe import features, plots, probes, report
from tfbert.probe import tasks as task_data
from tfbert.probe.attention import AttentionStatistics, chinese_font

__all__ = ["KIND", "run"]

logger = logging.getLogger(__name__)

KIND = "probe"  # the run kind in output_dir's manifest (tfbert.ownership)
SEGMENTATION_LABELS = ("B", "M", "E", "S")


def run(model: str, output_dir: str, attention: str | None = None,
        tasks: Sequence[str] = task_data.TASKS, max_train_sentences: int = 1500,
        max_test_sentences: int = 800, max_seq_length: int = 128, batch_size: int = 32,
        l2: float = probes.DEFAULT_L2, max_iter: int = 100, seed: int = 0, progress: bool = True
        ) -> dict[str, Any]:
    """Probes every layer of `model` and writes probe.json, probe.md, probe.png,
    attention_heads.png (and attention_layer{l}.png for `attention`) into `output_dir`.

    Args:
        model: str. Any checkpoint tfbert reads (folder, Google prefix, shipped name).
        output_dir: str. New, empty, or a previous probe run's folder.
        attention: str or None. A sentence whose attention maps to plot.
        tasks: the tasks to probe (`tfbert.probe.tasks.TASKS`).
        max_train_sentences: int. Probe-train size cap (sentences; reviews for sentiment).
        max_test_sentences: int. Probe-test size cap.
        max_seq_length: int. Longest packed input (cut to the model's positions).
        batch_size: int. Texts per forward pass.
        l2: float. Probe L2 strength (`probes.train_probe`).
        max_iter: int. Probe iterations.
        seed: int. Random init, control labels and probes.
        progress: bool. tqdm bars on stderr.

    Returns:
        The probe.json dict.
    """
    from tqdm.auto import tqdm

    tasks = _check(tasks, max_train_sentences, max_test_sentences, max_seq_length, batch_size)
    if attention is not None and not attention.strip():
        raise UserError("--attention text is empty; give the sentence whose attention to plot")
    path = features.resolve_model(model)
    ownership.claim_folder(output_dir, KIND, {"model": path})
    encoder = features.load_encoder(path)  # loads TensorFlow
    from tfbert.text.tokenizer import BertTokenizer

    tokenizer = BertTokenizer(features.vocab_path(path), lower_case=encoder.config.lower_case)
    special = {"cls_id": tokenizer.cls_id, "sep_id": tokenizer.sep_id}
    seq_length = min(max_seq_length, encoder.config.max_position_embeddings)
    sentence = _attention_input(tokenizer, attention, seq_length) if attention is not None else None
    config = encoder.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads

    char_tasks = [t for t in tasks if t in task_data.CHAR_TASKS]
    sets, data = {}, {"skipped_sentences": {}, "left_out_characters": {}}
    if char_tasks:
        for split, name, cap in (("dev", "train", max_train_sentences),
                                 ("test", "test", max_test_sentences)):
            sentences, skipped = task_data.char_sentences(split, cap)
            sets[f"chars_{name}"] = (sentences, [s.text for s in sentences])
            data["skipped_sentences"][name] = skipped
    if "sentiment" in tasks:
        for split, name, cap in (("dev", "train", max_train_sentences),
                                 ("test", "test", max_test_sentences)):
            texts, labels = task_data.sentiment_data(split, cap)
            sets[f"reviews_{name}"] = (labels, texts)
    encoded = {k: features.encode(tokenizer, texts, seq_length) for k, (_, texts) in sets.items()}
    for name in ("train", "test"):
        if f"chars_{name}" in encoded:
            data["left_out_characters"][name] = encoded[f"chars_{name}"].left_out

    random_encoder = features.random_init_encoder(config, seed)
    stats = AttentionStatistics(layers, heads)
    stats_set = "chars" if char_tasks else "reviews"
    kinds = {"model": features.hidden_state_function(encoder),
             "random_init": features.hidden_state_function(random_encoder)}
    with_attention = features.hidden_state_function(encoder, attention=True)
    cached: dict[tuple[str, str], np.ndarray] = {}
    total = 2 * sum(len(e.ids) for e in encoded.values())
    with tqdm(total=total, desc="forward passes", unit=" texts", disable=not progress) as bar:
        for key, enc in encoded.items():
            for kind, net in kinds.items():
                listen = kind == "model" and key.startswith(stats_set)
                cached[key, kind] = features.layer_features(
                    with_attention if listen else net, enc, special, seq_length,
                    "chars" if key.startswith("chars") else "mean", batch_size,
                    on_attention=stats.add if listen else None, progress=bar)

    entries: dict[str, Any] = {}
    fits = len(tasks) * 3 * (layers + 1)
    options = {"l2": l2, "max_iter": max_iter, "seed": seed}
    with tqdm(total=fits, desc="probes", unit=" probes", disable=not progress) as bar:
        for task in tasks:
            prefix = "reviews" if task == "sentiment" else "chars"
            train, test = _labels(task, sets, encoded)
            if task == "sentiment":
                prior = np.bincount(train.labels, minlength=len(train.names)) / len(train.labels)
                control = (task_data.hashed_labels(train.units, prior, seed),
                           task_data.hashed_labels(test.units, prior, seed))
            else:
                control = task_data.control_labels(train, test, seed)
            metric, classes = task_data.metric_of(task, train.names)
            x = {kind: (cached[f"{prefix}_train", kind], cached[f"{prefix}_test", kind])
                 for kind in kinds}
            scores = {kind: probes.probe_layers(x[kind][0], train.labels, x[kind][1],
                                                test.labels, metric, classes, progress=bar,
                                                **options) for kind in kinds}
            scores["control"] = probes.probe_layers(
                x["model"][0], control[0], x["model"][1], control[1], metric, classes,
                progress=bar, **options)
            entries[task] = report.task_entry(
                task, metric, scores["model"], scores["random_init"], scores["control"],
                labels=train.names, train_examples=len(train.labels),
                test_examples=len(test.labels),
                majority=probes.majority_score(train.labels, test.labels, metric, classes))
    del cached

    result = {"model": model, "num_layers": layers, "hidden_size": config.hidden_size,
              "num_attention_heads": heads, "seq_length": seq_length, "tasks": entries,
              "data": data, "claimed_layers": report.claimed_layers(layers),
              "ordering": report.ordering(entries),
              "settings": {"max_train_sentences": max_train_sentences,
                           "max_test_sentences": max_test_sentences, "batch_size": batch_size,
                           **options},
              "attention": {"sentences": stats.sentences, "sentence_set": stats_set,
                            "heads": stats.result()}}
    _write(result, output_dir, with_attention, sentence)
    logger.info("%s", result["ordering"]["sentence"])
    return result


def _check(tasks: Sequence[str], *sizes: int) -> list[str]:
    tasks = list(dict.fromkeys(tasks))
    unknown = [t for t in tasks if t not in task_data.TASKS]
    if unknown or not tasks:
        raise UserError(f"unknown probe task(s) {unknown or 'none given'}; tasks: "
                        f"{', '.join(task_data.TASKS)}")
    for name, value, low in zip(("max_train_sentences", "max_test_sentences", "max_seq_length",
                                 "batch_size"), sizes, (1, 1, 3, 1), strict=True):
        if value < low:
            raise UserError(f"{name} {value} is below {low}")
    return [t for t in task_data.TASKS if t in tasks]


def _attention_input(tokenizer: Any, text: str, seq_length: int) -> dict[str, Any]:
    """The --attention sentence packed as one input, with its token strings."""
    ids = tokenizer.tokenize([text]).to_list()[0]
    if not ids:
        raise UserError(f"--attention text {text!r} tokenizes to no tokens; give a sentence")
    if len(ids) > seq_length - 2:
        logger.warning("--attention text cut to its first %d tokens", seq_length - 2)
        ids = ids[:seq_length - 2]
    row = [tokenizer.cls_id, *ids, tokenizer.sep_id]
    vocab = tokenizer.vocab
    batch = np.asarray([row], np.int32)
    return {"inputs": {"input_ids": batch, "input_mask": np.ones_like(batch),
                       "segment_ids": np.zeros_like(batch)},
            "tokens": [vocab[i] for i in row], "text": text}


def _labels(task: str, sets: dict, encoded: dict) -> tuple[Any, Any]:
    """(probe-train, probe-test) TaskData of a task."""
    if task == "sentiment":
        return sets["reviews_train"][0], sets["reviews_test"][0]
    if task == "segmentation":
        names = list(SEGMENTATION_LABELS)
    elif task == "entity":
        names = list(task_data.ENTITY_LABELS)
    else:
        names = sorted({p for split in ("train", "test") for s in sets[f"chars_{split}"][0]
                        for p in s.labels["pos"]})
    return tuple(task_data.char_task_data(sets[f"chars_{split}"][0],
                                          encoded[f"chars_{split}"].kept, task, names)
                 for split in ("train", "test"))


def _write(result: dict[str, Any], output_dir: str, net: Any, sentence: dict | None) -> None:
    """All outputs into a staging folder, committed together under the folder's lock."""
    from tfbert.rundir import RunLock
    from tfbert.training import outputs

    title = f"{result['model']} ({result['num_layers']} layers)"
    config = {"model": result["model"], "settings": result["settings"]}
    with RunLock(output_dir), outputs.staged(output_dir, KIND, config) as staging:
        if sentence is not None:
            font = chinese_font()
            if font is None:
                logger.warning("no installed font shows Chinese (fc-list :lang=zh is empty); "
                               "attention maps are labelled by token position")
            probs = net(sentence["inputs"])["attention_probs"]
            files = []
            for layer, p in enumerate(probs, start=1):
                name = f"attention_layer{layer}.png"
                plots.plot_attention(list(p[0]), sentence["tokens"],
                                     staging.path(name), font,
                                     f"{title}, layer {layer}: {sentence['text']}")
                files.append(name)
            result["attention"]["sentence"] = {"text": sentence["text"],
                                               "tokens": sentence["tokens"], "files": files,
                                               "font": font}
        plots.plot_scores(result["tasks"], staging.path("probe.png"), title)
        plots.plot_heads(result["attention"]["heads"], staging.path("attention_heads.png"),
                         f"{title}: attention per head")
        write_text(staging.path("probe.md"), report.markdown(result))
        write_json(staging.path("probe.json"), result)
    logger.info("probe outputs in %s", os.path.abspath(output_dir))
