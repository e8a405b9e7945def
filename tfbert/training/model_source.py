"""The model a run trains: its config, built fresh or from a checkpoint, and the checks that
catch a missing checkpoint, a mismatched vocab, casing or sequence length before any data work.

A run names its model with `init_checkpoint` (weights), `bert_config_file` (a shape; with a
checkpoint it overrides the checkpoint's config) or `preset` (a shape whose vocab_size follows
the vocab). `model_config` turns those into a BertConfig, `build_model` into a model of any
tfbert task class, and `load_finetuned` reopens a fine-tuned model (a tfbert run's, or any
checkpoint with the task's head: google-research/bert's, Hugging Face's). A model and its
vocab travel together: `check_model_vocab` refuses a vocab_file or do_lower_case other than the
checkpoint's own unless the run says `allow_changed_vocab`.
"""

from __future__ import annotations

import dataclasses
import filecmp
import logging
import os
from collections.abc import Sequence
from typing import Any

from tfbert import checkpoints
from tfbert.config import BertConfig
from tfbert.errors import UserError
from tfbert.models.encoder import BertEncoder
from tfbert.text import vocab
from tfbert.training.runtime import build_scope

logger = logging.getLogger(__name__)


def model_config(config: Any, vocab_size: int, default: dict[str, Any] | None = None,
                 lower_case: bool | None = None) -> tuple[BertConfig | None, str]:
    """The BertConfig `config` names and where it comes from: its bert_config_file, else its
    preset (with an init_checkpoint either overrides the checkpoint's config file), else None
    when init_checkpoint supplies it, else the `default` shape.

    Args:
        config: a RunConfig. Its bert_config_file, preset and init_checkpoint.
        vocab_size: int. The vocab's size, taken by a preset or the default shape (a config
            file must match the vocab itself: `check_vocab_size`).
        default: dict or None. BertConfig fields of the shape used when nothing is named
            (None: one must be named).
        lower_case: bool or None. Case folding given to a preset or the default shape.
    """
    if config.bert_config_file:
        return BertConfig.from_json_file(config.bert_config_file), config.bert_config_file
    case = {} if lower_case is None else {"lower_case": lower_case}
    if config.preset:
        values = {**BertConfig.from_preset(config.preset).to_dict(), "vocab_size": vocab_size,
                  **case}
        return BertConfig(**values), f"preset {config.preset}"
    if config.init_checkpoint:
        return None, config.init_checkpoint
    if default is None:
        raise UserError("give init_checkpoint (a pretrained model), or bert_config_file or "
                        "preset (the model shape for random initialisation)")
    return BertConfig(vocab_size=vocab_size, **default, **case), "the built-in default"


def build_model(cls: type, bert_config: BertConfig | None, init_checkpoint: str | None,
                **head_kwargs: Any) -> Any:
    """`cls` (a tfbert task model, e.g. BertPretrainer or BertClassifier) with
    `init_checkpoint`'s weights (`bert_config`, if given, overrides its config file), else fresh
    from `bert_config`. Call it in `runtime.build_scope`."""
    if init_checkpoint:
        model = cls.from_pretrained(init_checkpoint, config=bert_config, **head_kwargs)
        logger.info("initialised from %s", init_checkpoint)
        return model
    return cls(BertEncoder(bert_config), **head_kwargs)


def checkpoint_config(init_checkpoint: str | None) -> BertConfig | None:
    """The model config a checkpoint holds, read from its config file without loading weights
    (config.json or bert_config.json); None when there is none to read (e.g. a keras-hub
    preset)."""
    if not init_checkpoint or "://" in init_checkpoint:
        return None
    init_checkpoint = os.fspath(checkpoints.resolve_source(init_checkpoint))  # a shipped name
    directory = (init_checkpoint if os.path.isdir(init_checkpoint)
                 else os.path.dirname(init_checkpoint))
    for name in ("config.json", "bert_config.json"):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            if "registered_name" in f.read():  # a keras-hub preset: its own config schema
                return None
        try:
            return BertConfig.from_json_file(path)
        except ValueError:
            return None
    return None


def vocab_beside(path: str | None) -> str | None:
    """vocab.txt in the folder `path` names (a checkpoint directory, a Google checkpoint prefix
    or a config file: its folder), else None."""
    if not path or "://" in path:
        return None
    candidate = os.path.join(path if os.path.isdir(path) else os.path.dirname(path), "vocab.txt")
    return candidate if os.path.isfile(candidate) else None


def checkpoint_vocab(init_checkpoint: str | None) -> str:
    """vocab.txt beside a checkpoint (its directory, or a Google checkpoint prefix's directory)."""
    if not init_checkpoint:
        raise UserError("vocab_file is required when there is no init_checkpoint")
    check_init_checkpoint(init_checkpoint)
    path = vocab_beside(init_checkpoint)
    if path is None:
        directory = (init_checkpoint if os.path.isdir(init_checkpoint)
                     else os.path.dirname(init_checkpoint))
        raise FileNotFoundError(f"no vocab.txt in {directory}; pass vocab_file")
    return path


def check_init_checkpoint(path: str | None) -> None:
    """Raises UserError, one line naming it, unless init_checkpoint `path` holds a checkpoint
    tfbert reads (a remote `scheme://` path is left to the reader). Call it before looking for a
    vocab beside it."""
    if not path or "://" in path:
        return
    if not os.path.exists(path) and not os.path.isfile(path + ".index"):
        raise UserError(f"init_checkpoint {path}: no such file or folder")
    try:
        fmt = checkpoints.detect_format(path)
        if fmt in ("hf", "tfbert"):
            checkpoints.hf.weight_file(path)
        elif fmt == "google":
            checkpoints.google.checkpoint_prefix(path)
    except checkpoints.CheckpointError as e:
        raise UserError(f"init_checkpoint {e}") from None


def check_model_vocab(config: Any, vocab_file: str | None) -> None:
    """Refuses to tokenize for init_checkpoint's model with a vocab or casing not its own.

    The model's vocab is the vocab.txt beside it (save_pretrained writes one there; Google's
    and Hugging Face's folders carry one): a vocab_file whose token differs at any id (from
    `[unusedN]` entries overwritten with new words aside, `vocab.changed_ids`) is refused,
    naming both files and the first id that differs. The model's casing is the one its files
    state (`checkpoints.stated_lower_case`): a do_lower_case against it is refused, naming
    both. `allow_changed_vocab` lets either through with a warning. A model with no vocab of
    its own, or whose casing nothing states, has nothing to compare. A missing or empty
    init_checkpoint is refused first (`check_init_checkpoint`).

    Args:
        config: a RunConfig. Its init_checkpoint, do_lower_case and allow_changed_vocab.
        vocab_file: str or None. The vocab the run tokenizes with.
    """
    path = config.init_checkpoint
    check_init_checkpoint(path)
    if not path or "://" in path:
        return
    problems = []
    own = vocab_beside(path)
    if own and vocab_file:
        problem = vocab_difference(own, vocab_file)
        if problem:
            problems.append(problem)
    stated = (checkpoints.stated_lower_case(path) if config.do_lower_case is not None
              else None)
    if stated and stated[0] != config.do_lower_case:
        flag = "--do_lower_case" if config.do_lower_case else "--nodo_lower_case"
        casing = "uncased (lower_case=True)" if stated[0] else "cased (lower_case=False)"
        problems.append(f"{flag} tokenizes against the model's casing: {path} is {casing}, "
                        f"as {stated[1]} says")
    if not problems:
        return
    if config.allow_changed_vocab:
        logger.warning("%s (allow_changed_vocab)", "; ".join(problems))
        return
    raise UserError("; ".join(problems) + ". A model and its vocab travel together: drop the "
                    "override, or pass --allow_changed_vocab if you mean it")


def vocab_difference(own: str, vocab_file: str) -> str | None:
    """How `vocab_file` differs from the model's own vocab file `own` (None: the same ids)."""
    if "://" not in own + vocab_file and filecmp.cmp(own, vocab_file, shallow=False):
        return None
    own_tokens, tokens = vocab.load_vocab(own), vocab.load_vocab(vocab_file)
    if len(tokens) != len(own_tokens):
        return (f"vocab_file {vocab_file} has {len(tokens)} tokens, the model's own vocab "
                f"{own} {len(own_tokens)}")
    changed = vocab.changed_ids(own_tokens, tokens)
    if not changed:
        if tokens != own_tokens:
            logger.info("vocab_file %s fills [unusedN] entries of the model's vocab %s",
                        vocab_file, own)
        return None
    i = changed[0]
    return (f"vocab_file {vocab_file} is not the model's own vocab {own}: {len(changed)} of "
            f"{len(tokens)} ids differ (id {i} is {tokens[i]!r} there, {own_tokens[i]!r} in the "
            "model's)")


def check_vocab_size(vocab_size: int, vocab_file: str, bert_config: BertConfig,
                     source: str) -> None:
    """Raises UserError when the vocab and the model's embedding table disagree."""
    if vocab_size != bert_config.vocab_size:
        raise UserError(
            f"vocab_file {vocab_file} has {vocab_size} tokens but the BERT config ({source}) has "
            f"vocab_size {bert_config.vocab_size}; they must match. Use the vocab the model was "
            f"trained with, or a config with vocab_size {vocab_size}.")


def check_seq_length(max_seq_length: int, max_position_embeddings: int, source: str) -> None:
    """Raises UserError when max_seq_length exceeds the model's position table."""
    if max_seq_length > max_position_embeddings:
        raise UserError(f"max_seq_length {max_seq_length} is larger than the model's "
                        f"max_position_embeddings {max_position_embeddings} ({source}); use at "
                        f"most {max_position_embeddings}")


@dataclasses.dataclass
class Finetuned:
    """A fine-tuned model reopened by `load_finetuned`.

    Attributes:
        model: the task model (BertClassifier, BertTokenClassifier, BertSpanLabeler).
        labels: list of str. Its class or tag names in output order ([] for a task without).
        vocab_file: str. The vocab the run tokenizes with.
        lower_case: bool. The casing it tokenizes with.
        metadata: dict. tfbert.json of a tfbert directory, else the head's entries
            (`tfbert.checkpoints.heads`: model_class, model_config, task, labels).
        global_step: int. The training step a google-research/bert checkpoint was saved at
            (its `global_step`, what GR's eval_results.txt reports), else 0.
    """

    model: Any
    labels: list[str]
    vocab_file: str
    lower_case: bool
    metadata: dict[str, Any]
    global_step: int = 0


def load_finetuned(config: Any, task: str, labelled: bool = True,
                   labels: Sequence[str] | None = None) -> Finetuned:
    """The fine-tuned model init_checkpoint holds, for eval/predict without training.

    init_checkpoint is a tfbert fine-tuning run's output_dir/model (tfbert.json naming the
    task), or any checkpoint with a head of the task (`tfbert.checkpoints.heads`): a
    google-research/bert run_classifier.py / run_squad.py output (a prefix such as
    out/model.ckpt-30; its config from bert_config_file when no bert_config.json is beside it)
    or a Hugging Face `BertFor...` directory. Google checkpoints carry no label names: theirs
    are `labels`, the label list of the run's task (GR's processor order), as are those of a
    Hugging Face head with transformers' default names LABEL_0, LABEL_1, ...

    Args:
        config: a TaskConfig. init_checkpoint; bert_config_file or preset (a checkpoint
            without a tfbert.json only); vocab_file and do_lower_case override the model's
            own only with allow_changed_vocab (`check_model_vocab`).
        task: str. The task it must have been trained for ("classification", "ner", "qa", ...).
        labelled: bool. Whether the model must come with labels (classes or tags).
        labels: sequence of str or None. The run's task's labels, for a head without names.

    Returns:
        Finetuned.
    """
    path = config.init_checkpoint
    if not path:
        raise UserError(f"without do_train, init_checkpoint must be a fine-tuned {task} model "
                        "(output_dir/model of a training run, or a google-research/bert or "
                        "Hugging Face checkpoint with its head)")
    check_init_checkpoint(path)
    if "://" not in path and checkpoints.detect_format(path) != "tfbert":
        return _load_head(config, task, labelled, labels)
    metadata = checkpoints.read_metadata(path)
    if metadata.get("task") != task or (labelled and "labels" not in metadata):
        listed = "" if "labels" in metadata or not labelled else " and lists no labels"
        raise UserError(f"{path}: tfbert.json says task {metadata.get('task')!r}{listed}; "
                        f"without do_train init_checkpoint must be a fine-tuned {task} model "
                        f"(task {task!r})")
    vocab_file = config.vocab_file or os.path.join(path, "vocab.txt")
    check_model_vocab(config, vocab_file)
    with build_scope(config):
        model = checkpoints.load_model(path)
    lower_case = config.lower_case(bool(metadata.get("lower_case",
                                                     model.encoder.config.lower_case)))
    return Finetuned(model, list(metadata.get("labels", [])), vocab_file, lower_case, metadata)


def _load_head(config: Any, task: str, labelled: bool,
               labels: Sequence[str] | None) -> Finetuned:
    """`load_finetuned` of a Google or Hugging Face checkpoint with a task head."""
    path = config.init_checkpoint
    vocab_file = config.vocab_file or checkpoint_vocab(path)
    check_model_vocab(config, vocab_file)
    bert_config, _ = model_config(config, len(vocab.load_vocab(vocab_file)))
    checkpoint = checkpoints.read_checkpoint(path, bert_config)
    metadata = dict(checkpoint.metadata or {})
    if metadata.get("task") != task:
        held = (f"a {metadata['model_class']} head (task {metadata['task']!r})"
                if metadata.get("task") else "no task head")
        raise UserError(f"init_checkpoint {path}: a {checkpoint.format} checkpoint with {held}; "
                        f"without do_train it must be a fine-tuned {task} model: a tfbert run's "
                        "output_dir/model, a google-research/bert run_classifier.py / "
                        "run_squad.py output, or a Hugging Face BertFor... directory")
    names = list(metadata.get("labels") or [])
    count = int(metadata.get("model_config", {}).get("num_classes", len(names)))
    generic = names == [f"LABEL_{i}" for i in range(count)]
    if labelled and labels is not None and (not names or generic):
        if len(labels) != count:
            raise UserError(f"init_checkpoint {path}: its head has {count} classes, the task's "
                            f"labels are {len(labels)} ({', '.join(labels)})")
        names = list(labels)
    if labelled and not names:
        raise UserError(f"init_checkpoint {path}: a {checkpoint.format} checkpoint names no "
                        "labels; give the task it was fine-tuned on (task_name with data_dir: "
                        "its labels in google-research/bert's processor order)")
    metadata["labels"] = names
    with build_scope(config):
        model = checkpoints.from_pretrained(checkpoint)
    logger.info("%s: %s head of %s (labels %s)", path, metadata["model_class"],
                checkpoint.format, names or "none")
    step = google_step(checkpoint.source) if checkpoint.format == "google" else 0
    lower_case = config.lower_case(model.encoder.config.lower_case)
    return Finetuned(model, names, vocab_file, lower_case, metadata, step)


def google_step(prefix: str) -> int:
    """The `global_step` a google-research/bert training checkpoint was saved at (0 without)."""
    reader = checkpoints.google.open_reader(prefix)
    return int(reader.get_tensor("global_step")) if reader.has_tensor("global_step") else 0
