"""Distillation end to end: `run_distill(config) -> results`, behind run_distill.py.

The teacher is any fine-tuned classification or NER model tfbert reads (a tfbert run's
model/, or the run's output directory; a Hugging Face BertForSequenceClassification /
BertForTokenClassification directory; a google-research/bert run_classifier.py checkpoint);
its task (`tfbert.tasks.registry`) decides which data the run reads, with that task's own
fields: `DistillClassificationConfig` is a `ClassificationConfig` and `DistillNerConfig` a
`NerConfig`, each plus the distillation fields of `DistillOptions`. `distill_config(teacher_dir,
**fields)` picks the class from the teacher.

The run builds the student (`tfbert.models.students`: a preset shape, a config file, or every
k-th teacher layer), packs the training rows (the labelled training set, unlabelled text the
teacher labels, augmented copies: `tfbert.data.distill_data`), takes the teacher's logits on
them once (from `teacher_cache` when it holds them for this teacher and these inputs), trains
with `tfbert.models.distiller.Distiller` in the shared fine-tuning loop (BERT's optimizer, the
best dev epoch kept), and scores student and teacher on the same dev and test sets. With
hidden or attention transfer the teacher runs every step instead (its hidden states are
needed), and teacher_cache is refused.

It writes to output_dir (committed together, as the fine-tuning commands do):

    results.json      {"task", "metric", "labels", "dev" / "test": the student's scores,
                       "teacher": {"dir", "dev", "test", "parameters"}, "student": {"init",
                       "config", "parameters"}, "kept": {"dev", "test"}: student score /
                       teacher score on `metric`, "parameters": {"teacher", "student",
                       "student_share"}, "distillation": the losses' settings and where the
                       teacher's outputs came from, "data": row counts, "train": history}
    test_predictions  the student's, as the task's command writes them (.tsv / .jsonl+.conll)
    model/            the student (tfbert format; tfbert.json as the teacher's task writes it,
                      plus "distilled_from"): `python -m tfbert.export` takes it
    logs/             TensorBoard

Classification reads texts cut to max_seq_length (long_input "truncate"); NER reads long
sentences as the NER task does (windows by default). Batches are padded to max_seq_length (no
length buckets: the teacher's per-token outputs are [T, C]). QA teachers train with the Keras
`Distiller` (its soft loss covers start and end positions), not with this run.

Example:
>>> config = distill_config(  # doctest: +SKIP
...     "output/sentiment", output_dir="output/sentiment_mini", task_name="sentiment",
...     student_preset="bert-mini", unlabelled_builtin="reviews")
>>> results = run_distill(config)  # doctest: +SKIP
>>> results["kept"]["test"], results["parameters"]["student_share"]  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Any

import keras
import tensorflow as tf

from tfbert import checkpoints
from tfbert.config import BertConfig
from tfbert.data import distill_data
from tfbert.errors import UserError
from tfbert.models import students
from tfbert.models.distiller import DISTILL_MASK, TEACHER_LOGITS, Distiller, teacher_logits
from tfbert.tasks import registry
from tfbert.tasks.distill_tasks import KINDS
from tfbert.training import finetune as ft
from tfbert.training import model_source, runtime
from tfbert.training.config import field
from tfbert.training.outputs import Staging, save_model

logger = logging.getLogger(__name__)

KIND = "distillation"  # the run kind in the output folder's manifest
# The run-config fields the teacher and the student stand for: the teacher is teacher_dir, the
# student's shape student_*, its vocab and casing the teacher's.
REPLACED_FIELDS = {"init_checkpoint": "teacher_dir", "bert_config_file": "student_config_file",
                   "preset": "student_preset", "vocab_file": "teacher_dir",
                   "do_lower_case": "teacher_dir", "allow_changed_vocab": "teacher_dir"}


@dataclasses.dataclass
class DistillOptions:
    """The distillation fields, added to the teacher task's config (`DistillClassificationConfig`,
    `DistillNerConfig`); each field's help is its flag's.

    The defaults (soft and hard loss, weight 1 each, T = 2; no intermediate transfer) were
    chosen on the built-in sentiment task: a stand-in teacher (run_pretraining.py's default
    checkpoint fine-tuned by `run_classifier.py --task_name=sentiment
    --init_checkpoint=output/pretrain_default/model --max_seq_length=64`: 2 layers, hidden 128,
    test accuracy 0.820) and a 1-layer, hidden-64 student (2 heads, intermediate 256: 40% of
    the teacher's parameters) trained on 2,000 labelled reviews for 3 epochs (`run_distill.py
    --teacher_dir=TEACHER --student_config_file=STUDENT.json --task_name=sentiment
    --max_train_examples=2000 --seed=S` and the flags below; test 1,737 reviews). Mean test
    accuracy over seeds 12345, 1, 2: labels alone (--soft_weight=0) 0.761, soft and hard at
    T = 2 0.781, at T = 4 0.779 (seed 12345 at T = 1, 2, 4: 0.778, 0.782, 0.789); with
    --hidden_weight=1 0.801 (the teacher then runs every step: 1.4-1.5x the wall time, no
    teacher_cache); one seed each: --hidden_weight=1 --attention_weight=1 0.796,
    --unlabelled_builtin=reviews --max_unlabelled_examples=6000 0.816, --augment_copies=3
    (5,765 augmented reviews) 0.794 against 0.782 without. Hidden transfer stays
    off by default: the default run's teacher runs once (and can be cached), and on People's
    Daily NER (4,000 sentences, a student of every second layer of a 2-layer teacher that the
    labels alone already beat: test F1 0.409 against the teacher's 0.320) it moved F1 from
    0.353 to 0.345.
    """

    teacher_dir: str | None = field(
        None, "The teacher: a fine-tuned model folder (a tfbert run's model/, a Hugging Face "
        "BertForSequenceClassification / BertForTokenClassification directory, a "
        "google-research/bert run_classifier.py checkpoint) or a fine-tuning run's output "
        "directory (its model/ is used). Its task picks the data flags that apply.")
    student_preset: str | None = field(
        None, "Student shape: a tfbert.PRESETS name (bert-tiny, bert-mini, bert-small, "
        "bert-medium, ...): its layers, width, heads and intermediate size; the rest of the "
        "config (vocab, positions, activation, dropout) is the teacher's.")
    student_config_file: str | None = field(
        None, "Student shape: a BertConfig JSON file (tfbert, Google or Hugging Face); its "
        "vocab_size must be the teacher's.")
    student_layers_from_teacher: int | None = field(
        None, "Student: every K-th teacher layer (the top one kept) with the teacher's "
        "embeddings, pooler and head copied (DistilBERT's initialisation).", lower_bound=1)
    student_checkpoint: str | None = field(
        None, "Student: a pretrained model folder (run_pretraining.py's model/, a Hugging "
        "Face or google-research/bert BERT, tfbert-chinese) whose encoder starts the student, "
        "its head fresh (pre-trained distillation: Turc et al., 2019); its vocab must be the "
        "teacher's.")
    temperature: float = field(
        2.0, "Softmax temperature T of the soft loss (which is scaled by T^2).", greater_than=0)
    soft_weight: float = field(
        1.0, "Weight of the soft loss: the teacher's outputs at temperature T as targets "
        "(KL; multi-label binary cross-entropy; NER per token). 0: off.", lower_bound=0)
    hard_weight: float = field(
        1.0, "Weight of the task's own loss on the gold labels (unlabelled examples have "
        "none). 0: off.", lower_bound=0)
    hidden_weight: float = field(
        0.0, "Weight of TinyBERT's hidden-state loss: the student's embedding output and "
        "layers (through a learned projection when the widths differ) against the teacher's "
        "mapped layers. 0: off; on, the teacher runs every step.", lower_bound=0)
    attention_weight: float = field(
        0.0, "Weight of TinyBERT's attention loss: the student's attention probabilities "
        "against the teacher's mapped layers'. 0: off; on, the teacher runs every step.",
        lower_bound=0)
    teacher_cache: str | None = field(
        None, "A TFRecord file for the teacher's logits on the training rows: read when its "
        "key (the teacher's weights, the packed inputs, max_seq_length) matches this run, "
        "recomputed and replaced when not (a file tfbert did not write is refused). Without "
        "it they are computed once per run. Not with --hidden_weight / --attention_weight.")
    unlabelled_file: str | None = field(
        None, "Unlabelled in-domain text the teacher labels: one example per line (a "
        "sentence-pair teacher: text<TAB>text_b), read in --input_encoding.")
    unlabelled_builtin: str | None = field(
        None, "Built-in unlabelled text: reviews (whole reviews) or people_daily (sentences), "
        "the parts the built-in tasks train on, the run's dev and test texts left out.",
        choices=list(distill_data.BUILTIN_SOURCES))
    max_unlabelled_examples: int | None = field(
        None, "Use only the first N unlabelled examples.", lower_bound=1)
    augment_copies: int = field(
        0, "Augmentation (TinyBERT's): up to N copies of each training text with words "
        "replaced by jieba words of the same part of speech and length, labelled by the "
        "teacher (tfbert/data/distill_data.py). 0: off.", lower_bound=0)
    augment_replace_prob: float = field(
        0.4, "Augmentation: the chance that a Chinese noun, verb or adjective is replaced "
        "(TinyBERT's 0.4).", greater_than=0, upper_bound=1)
    # Batches are padded to max_seq_length: the teacher's per-token outputs are [T, C].
    length_buckets: bool = False

    def __post_init__(self) -> None:
        for name, instead in REPLACED_FIELDS.items():
            if name != "init_checkpoint" and getattr(self, name) not in (None, False):
                raise UserError(f"{name} does not apply to distillation: use {instead}")
        if self.length_buckets:
            raise UserError("length_buckets does not apply to distillation: its batches are "
                            "padded to max_seq_length (the teacher's per-token outputs)")
        # init_checkpoint is the teacher's model folder (what the fine-tuning runtime reads);
        # a config rebuilt from its own fields holds it already.
        self.teacher_dir = self.teacher_dir or self.init_checkpoint
        resolved = teacher_model_dir(self.teacher_dir)
        if self.init_checkpoint not in (None, resolved, self.teacher_dir):
            raise UserError("init_checkpoint does not apply to distillation: use teacher_dir")
        self.init_checkpoint = resolved
        given = [name for name in ("student_preset", "student_config_file",
                                   "student_layers_from_teacher", "student_checkpoint")
                 if getattr(self, name) is not None]
        if len(given) != 1:
            raise UserError("give one student: student_preset, student_config_file, "
                            "student_layers_from_teacher or student_checkpoint (got "
                            f"{given or 'none'})")
        if self.unlabelled_file and self.unlabelled_builtin:
            raise UserError("give unlabelled_file or unlabelled_builtin, not both")
        if self.teacher_cache and (self.hidden_weight or self.attention_weight):
            raise UserError("teacher_cache holds the teacher's logits only; hidden_weight and "
                            "attention_weight need its hidden states every step (the teacher "
                            "runs live): drop teacher_cache, or those weights")
        if not (self.soft_weight or self.hard_weight or self.hidden_weight
                or self.attention_weight):
            raise UserError("every loss weight is 0: nothing to train")
        extra = self.unlabelled_file or self.unlabelled_builtin or self.augment_copies
        if extra and not (self.soft_weight or self.hidden_weight or self.attention_weight):
            raise UserError("unlabelled and augmented text train only the teacher-matching "
                            "losses, and soft_weight, hidden_weight and attention_weight are 0")
        self.student_checkpoint = checkpoints.resolve_source(self.student_checkpoint)
        if self.learning_rate is None:
            self.learning_rate = ft.default_learning_rate(self._student_source())
        super().__post_init__()  # the task's config: its data source, bounds, ...
        if not self.do_train:
            raise UserError("distillation trains a student: do_train must stay on")

    def _student_source(self) -> Any:
        """What `ft.default_learning_rate` reads for the student: its checkpoint (the teacher's
        layers, a pretrained student) or its shape."""
        checkpoint = (self.init_checkpoint if self.student_layers_from_teacher
                      else self.student_checkpoint)
        return _Source(checkpoint, self.student_config_file, self.student_preset)

    @property
    def student_description(self) -> str:
        if self.student_preset:
            return f"preset {self.student_preset}"
        if self.student_config_file:
            return f"config file {self.student_config_file}"
        if self.student_checkpoint:
            return f"pretrained {self.student_checkpoint}"
        return f"every {self.student_layers_from_teacher}th teacher layer"


@dataclasses.dataclass
class _Source:
    init_checkpoint: str | None
    bert_config_file: str | None
    preset: str | None


@dataclasses.dataclass
class DistillClassificationConfig(DistillOptions, registry.get("classification").config_class):
    """Distillation of a classification teacher: ClassificationConfig's data fields (task_name,
    data_dir, train_file, dev_file, test_file, tfds_name, class_weights, best_metric, ...) and
    DistillOptions'. multi_label must be the teacher's (`distill_config` sets it)."""


@dataclasses.dataclass
class DistillNerConfig(DistillOptions, registry.get("ner").config_class):
    """Distillation of an NER teacher: NerConfig's data fields (task_name, train_file,
    dev_file, test_file, char_level, long_input, doc_stride, label_alignment) and
    DistillOptions'. crf must be the teacher's (`distill_config` sets it)."""


CONFIGS = {"classification": DistillClassificationConfig, "ner": DistillNerConfig}
BUILTIN_DEFAULT = {"classification": "sentiment", "ner": "people_daily"}


# --- the teacher -----------------------------------------------------------------------------


def teacher_model_dir(teacher_dir: str | None) -> str:
    """The folder (or Google checkpoint prefix) holding the teacher model: `teacher_dir`, or
    its model/ when it is a fine-tuning run's output directory.

    Raises:
        UserError: missing, or holding no model.
    """
    if not teacher_dir:
        raise UserError("teacher_dir is required: the fine-tuned model to distil")
    if os.path.isfile(teacher_dir + ".index"):
        return teacher_dir  # a google-research/bert checkpoint prefix
    if not os.path.isdir(teacher_dir):
        raise UserError(f"teacher_dir {teacher_dir}: no such folder")
    own = [name for name in ("tfbert.json", "config.json", "bert_config.json", "vocab.txt")
           if os.path.isfile(os.path.join(teacher_dir, name))]
    run_model = os.path.join(teacher_dir, "model")
    if not own and os.path.isfile(os.path.join(run_model, "tfbert.json")):
        return run_model
    if not own:
        raise UserError(f"teacher_dir {teacher_dir} holds no model (no tfbert.json, "
                        "config.json or bert_config.json, and no run's model/ folder)")
    return teacher_dir


def teacher_task(path: str) -> tuple[Any, dict[str, Any]]:
    """(the registered Task, the teacher's metadata) of the model at `path`, read without
    building it: tfbert.json, or a Hugging Face / Google checkpoint's head.

    Raises:
        UserError: no task head, or a task distillation does not run.
    """
    try:
        fmt = checkpoints.detect_format(path)
        metadata = (checkpoints.read_metadata(path) if fmt == "tfbert"
                    else dict(checkpoints.read_checkpoint(path).metadata or {}))
    except checkpoints.CheckpointError as e:
        raise UserError(f"teacher_dir {e}") from None
    name = metadata.get("model_class")
    task = registry.find(name) if name else None
    if task is None or task.name not in CONFIGS:
        held = (f"a {name} (task {task.name!r})" if task else
                "a model without a task head")
        why = (" (the Keras Distiller takes a BertSpanLabeler; this command reads "
               "classification and NER data)" if task and task.name == "qa" else "")
        raise UserError(f"teacher_dir {path} holds {held}: the teacher must be a fine-tuned "
                        f"{' or '.join(CONFIGS)} model with its head{why}")
    return task, metadata


def distill_config(teacher_dir: str, **fields: Any) -> DistillOptions:
    """The config of a distillation of the teacher at `teacher_dir`: the class its task needs,
    its multi_label / crf, its max_seq_length unless given, and the task's built-in data
    (sentiment, people_daily) when no data source is given.

    Args:
        teacher_dir: str. See DistillOptions.teacher_dir.
        **fields: any fields of the task's distillation config.
    """
    task, metadata = teacher_task(teacher_model_dir(teacher_dir))
    cls = CONFIGS[task.name]
    head = metadata.get("model_config", {})
    if task.name == "classification":
        fields.setdefault("multi_label", bool(head.get("multi_label", False)))
    else:
        fields.setdefault("crf", bool(head.get("crf", False)))
    if metadata.get("max_seq_length"):
        fields.setdefault("max_seq_length", int(metadata["max_seq_length"]))
    sources = ("task_name", "data_dir", "train_file", "dev_file", "test_file", "tfds_name")
    if not any(fields.get(name) for name in sources):
        fields["task_name"] = BUILTIN_DEFAULT[task.name]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise UserError(f"{', '.join(unknown)} do(es) not apply to a {task.name} teacher")
    return cls(teacher_dir=teacher_dir, **fields)


# --- the run ---------------------------------------------------------------------------------


def run_distill(config: DistillOptions) -> dict[str, Any]:
    """Distils config's teacher into a student as `config` says; returns results.json.

    Example: see the module docstring.
    """
    with ft.task_run(config, KIND) as run:
        return _run(config, run)


def _run(config: Any, run: Staging) -> dict[str, Any]:
    keras.utils.set_random_seed(config.seed)
    task, _ = teacher_task(config.init_checkpoint)
    declared = model_source.checkpoint_config(config.init_checkpoint)
    if declared is not None and config.student_config_file:  # before any data or model work
        students.check_vocab_size(declared.vocab_size,
                                  BertConfig.from_json_file(config.student_config_file),
                                  f"student config {config.student_config_file}")
    kind = KINDS[task.name](config)
    loaded = ft.load_finetuned(config, task.name, labels=kind.data_labels)
    teacher = loaded.model
    if registry.task_of(teacher) is not task:
        raise UserError(f"teacher_dir {config.init_checkpoint}: its metadata names "
                        f"{task.name}, its model is a {type(teacher).__name__}")
    ft.check_seq_length(config, teacher)
    kind.check_teacher(teacher, loaded)
    with runtime.build_scope(config, teacher.distribute_strategy):  # the teacher's strategy
        student, layers = _build_student(config, teacher, loaded.vocab_file)
    ft.check_seq_length(config, student)
    kind.prepare(loaded.vocab_file, loaded.lower_case, loaded.labels)

    rows = kind.training_rows()
    teacher_params = students.model_parameters(teacher)
    student_params = students.model_parameters(student)
    logger.info("teacher %s parameters, student %s (%.1f%%)", f"{teacher_params['total']:,}",
                f"{student_params['total']:,}",
                100 * student_params["total"] / teacher_params["total"])
    results: dict[str, Any] = {"task": task.name, "metric": kind.metric,
                               "labels": loaded.labels, "run_id": run.run_id}
    results["teacher"] = {"dir": config.init_checkpoint, "parameters": teacher_params,
                          **kind.score_splits(teacher)}

    distiller_args = dict(temperature=config.temperature, soft_weight=config.soft_weight,
                          hard_weight=config.hard_weight, hidden_weight=config.hidden_weight,
                          attention_weight=config.attention_weight, layer_map=layers,
                          hard_loss=kind.hard_loss(student))
    x = dict(rows.inputs)
    source = "live (every step: hidden or attention transfer)"
    with teacher.distribute_strategy.scope():
        distiller = Distiller(teacher, student, **distiller_args)
    if not config.soft_weight and not distiller.intermediate:
        source = "not run (soft_weight 0: the labels alone)"
    elif not distiller.intermediate:
        key = distill_data.cache_key(
            [w.numpy() for w in teacher.weights], rows.inputs,
            teacher_dir=config.init_checkpoint, data=kind.description)
        logits, source = distill_data.teacher_outputs(
            config.teacher_cache, key,
            lambda: teacher_logits(teacher, rows.inputs, config.eval_batch_size))
        x[TEACHER_LOGITS] = logits
    if rows.distill_mask is not None:
        x[DISTILL_MASK] = rows.distill_mask
    n = len(rows.labels)
    train_ds = (tf.data.Dataset.from_tensor_slices((x, rows.labels, rows.weights))
                .shuffle(n, seed=config.seed, reshuffle_each_iteration=True)
                .batch(config.micro_batch_size).prefetch(tf.data.AUTOTUNE))
    recorder = _EpochLosses()
    outcome = ft.finetune(
        distiller, train_ds, loss=None,
        config=config.finetune_config(kind.metric, log_dir=run.path("logs")),
        evaluate_fn=(lambda d: kind.score(d.student, "dev")) if "dev" in kind.eval_splits
        else None,
        steps_per_epoch=math.ceil(n / config.micro_batch_size), callbacks=[recorder])
    for record, losses in zip(outcome.history, recorder.epochs, strict=False):
        record.update(losses)

    results.update(kind.score_splits(student, outcome.best_metrics or None))
    results["student"] = {"init": config.student_description,
                          **({"teacher_layers": layers} if layers else {}),
                          "config": student.encoder.config.to_dict(),
                          "parameters": student_params}
    results["kept"] = {split: _share(results[split].get(kind.metric),
                                     results["teacher"][split].get(kind.metric))
                       for split in kind.eval_splits}
    results["parameters"] = {"teacher": teacher_params["total"],
                             "student": student_params["total"],
                             "student_share": student_params["total"] / teacher_params["total"]}
    results["distillation"] = {
        "temperature": config.temperature, "soft_weight": config.soft_weight,
        "hard_weight": config.hard_weight, "hidden_weight": config.hidden_weight,
        "attention_weight": config.attention_weight,
        **({"layer_map": distiller.layer_map} if distiller.intermediate else {}),
        "teacher_outputs": source,
        **({"teacher_cache": config.teacher_cache} if config.teacher_cache else {})}
    results["data"] = rows.counts
    results["train"] = {"learning_rate": config.learning_rate, "rows": n,
                        "best_epoch": outcome.best_epoch,
                        "num_train_steps": outcome.num_train_steps,
                        "stopped_epoch": outcome.stopped_epoch, "history": outcome.history}
    save_model(student, run.path("model"), vocab_file=loaded.vocab_file,
               metadata={**kind.model_metadata(results.get("dev")), "run_id": run.run_id,
                         "distilled_from": config.init_checkpoint})
    kind.write_predictions(student, run, results.get("dev"))
    for split in kind.eval_splits:
        logger.info("%s %s: student %.4f, teacher %.4f (kept %s)", split, kind.metric,
                    results[split][kind.metric], results["teacher"][split][kind.metric],
                    results["kept"][split])
    ft.write_results(run.directory, results)
    return results


def _build_student(config: Any, teacher: Any, teacher_vocab: str
                   ) -> tuple[Any, list[int] | None]:
    if config.student_layers_from_teacher:
        return students.student_from_teacher_layers(teacher,
                                                    every=config.student_layers_from_teacher)
    if config.student_config_file:
        return students.student_from_config(teacher, config.student_config_file), None
    if config.student_checkpoint:
        return pretrained_student(teacher, config.student_checkpoint, teacher_vocab), None
    return students.student_from_preset(teacher, config.student_preset), None


def pretrained_student(teacher: Any, checkpoint: str, teacher_vocab: str) -> Any:
    """`students.student_from_checkpoint` after checking that the checkpoint's vocab (its
    vocab.txt, when it has one) holds the teacher's token ids.

    Raises:
        UserError: another vocab (other ids, or another size).
    """
    model_source.check_init_checkpoint(checkpoint)
    own = model_source.vocab_beside(checkpoint)
    if own is not None:
        difference = model_source.vocab_difference(teacher_vocab, own)
        if difference is not None:
            raise UserError(f"student_checkpoint {checkpoint}: its vocab is not the teacher's "
                            f"({difference}); a student reads the teacher's token ids")
    return students.student_from_checkpoint(teacher, checkpoint,
                                            model_source.checkpoint_config(checkpoint))


def _share(student: float | None, teacher: float | None) -> float | None:
    """student / teacher (None when either is missing or the teacher scores 0)."""
    if student is None or not teacher:
        return None
    return float(student) / float(teacher)


class _EpochLosses(keras.callbacks.Callback):
    """Each epoch's training losses (soft_loss, hard_loss, ...; not the dev scores KeepBest
    adds to the logs as val_*) for results.json."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[dict[str, float]] = []

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epochs.append({f"train_{k}": float(v) for k, v in (logs or {}).items()
                            if k.endswith("_loss") and not k.startswith("val_")})
