"""Distillation: a teacher and its students on the built-in tasks, the table by one command.

For each task (sentiment: accuracy on the 1,737 test reviews; ner: People's Daily entity F1 on
the first 1,000 test sentences) the run

1. fine-tunes the teacher from a pretrained checkpoint (--pretrained) as the quality table's
   setup does (bench/quality.py: sentiment all 13,846 training reviews, seq 64, 2 epochs; ner
   the first 3,000 training sentences, seq 128, 3 epochs) at each of --teacher_learning_rates
   (1e-4, 3e-4 and 1e-3: a 4-layer, hidden-256 checkpoint gets BERT's 5e-5 by default, low
   for a small model), keeping the best on dev; run_classifier.py / run_ner.py's defaults
   otherwise;
2. trains one student shape (STUDENT: 4 layers, hidden 96, 4 heads, intermediate 384, the
   teacher's vocab: under a quarter of the teacher's parameters), pretrained as the teacher
   was (`run_pretraining.py --bert_config_file=WORK/student_config.json`, the built-in data
   and schedule, --student_pretraining_steps; or --student_checkpoint, such a model made
   before; --student_pretraining_steps=0: random initialisation), with run_distill.py in
   each variant (VARIANTS): labels alone (the task's loss, no teacher), soft
   targets (the defaults: soft and hard loss at T = 2), with intermediate transfer (hidden
   states), with unlabelled text (ner: People's Daily training sentences the labelled set does
   not hold; sentiment: every built-in review is labelled already, so TinyBERT's augmented
   copies stand in);
3. measures the teacher and the best student on dev (the variant a user would ship): the
   parameters, the TF Serving SavedModel's size and batch-1 latency, TFLite float32 and int8
   (dynamic-range, ids in) sizes, batch-1 latencies and test scores, and the Keras model's
   batch-1 latency (bench/model_scores.py).

    python run_pretraining.py --preset=bert-mini --num_train_steps=10000 \\
        --num_warmup_steps=3000 --output_dir=output/teacher/pretrain_mini
    python -m bench.distill --pretrained=output/teacher/pretrain_mini/model \\
        --work_dir=output/distill_table      # pretrains the student in WORK/student_pretrain

Every run writes under --work_dir (<task>/teacher, <task>/<variant>, <task>/saved_models,
<task>/tflite); a run whose results.json is there already is read, not rerun, so an
interrupted table resumes. The record goes to --output (default
bench/results/distill-<machine>-<date>.json, refused if it exists); `python -m bench.report`
turns it into docs/results.md's section.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.common import REPO_ROOT, isa_record, load_average, machine_name, new_results_file
from bench.quality import SETUPS
from tfbert.fileio import write_json

TASKS = {"sentiment": SETUPS["sentiment"], "ner": SETUPS["ner"]}
# The student's shape: a BertConfig's fields (vocab_size, positions and the rest: the teacher's).
STUDENT = {"hidden_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
           "intermediate_size": 384}
# Student epochs: a random-init student learns more slowly than the pretrained teacher.
STUDENT_EPOCHS = {"sentiment": 3, "ner": 5}
VARIANTS = {
    "labels": {"sentiment": {"soft_weight": 0.0}, "ner": {"soft_weight": 0.0}},
    "soft": {"sentiment": {}, "ner": {}},
    "hidden": {"sentiment": {"hidden_weight": 1.0}, "ner": {"hidden_weight": 1.0}},
    "unlabelled": {"sentiment": {"augment_copies": 2},
                   "ner": {"unlabelled_builtin": "people_daily",
                           "max_unlabelled_examples": 8000}},
    "hidden_unlabelled": {"sentiment": {"hidden_weight": 1.0, "augment_copies": 2},
                          "ner": {"hidden_weight": 1.0, "unlabelled_builtin": "people_daily",
                                  "max_unlabelled_examples": 8000}},
}
DEFAULT_VARIANTS = ("labels", "soft", "hidden", "unlabelled")
VARIANT_NAMES = {"labels": "labels alone", "soft": "soft targets (T = 2) + labels",
                 "hidden": "+ hidden-state transfer", "unlabelled": "+ unlabelled text",
                 "hidden_unlabelled": "+ hidden-state transfer + unlabelled text"}
LATENCY_RUNS = 200
# --quick (a check that the whole table runs, not figures): few examples, one epoch each.
QUICK = {"max_seq_length": 32, "max_train_examples": 300, "max_eval_examples": 100, "epochs": 1,
         "student_epochs": 1, "max_unlabelled_examples": 300, "augment_copies": 1,
         "latency_runs": 10}


def settings(task: str, quick: bool) -> dict[str, Any]:
    """The task's run settings: the quality setup's (TASKS), the student's epochs, the
    variants' flags and the latency runs; --quick shrinks them (QUICK)."""
    setup = TASKS[task]
    out = {"max_seq_length": setup.max_seq_length, "batch_size": setup.batch_size,
           "epochs": setup.epochs, "max_train_examples": setup.max_train_examples,
           "max_eval_examples": setup.max_eval_examples, "metric": setup.metric,
           "student_epochs": STUDENT_EPOCHS[task], "latency_runs": LATENCY_RUNS,
           "variants": {v: dict(flags[task]) for v, flags in VARIANTS.items()}}
    if quick:
        out.update({k: QUICK[k] for k in ("max_seq_length", "max_train_examples",
                                          "max_eval_examples", "epochs", "student_epochs",
                                          "latency_runs")})
        for flags in out["variants"].values():
            for key in ("max_unlabelled_examples", "augment_copies"):
                if key in flags:
                    flags[key] = QUICK[key]
    return out


def run_teacher(task: str, pretrained: str, out: str, seed: int, setup: dict[str, Any],
                learning_rates: Sequence[float]) -> tuple[str, dict[str, Any]]:
    """The teacher fine-tuned as the quality setup at each learning rate (a run whose
    results.json is there is read); returns the folder and results of the best on dev, with
    every rate's dev score under "dev_by_learning_rate"."""
    from tfbert.tasks.classification import ClassificationConfig, run_classification
    from tfbert.tasks.ner import NerConfig, run_ner

    run, config_cls, task_args = {
        "sentiment": (run_classification, ClassificationConfig, {"task_name": "sentiment"}),
        "ner": (run_ner, NerConfig, {"task_name": "people_daily"})}[task]
    runs = {}
    for lr in learning_rates:
        folder = os.path.join(out, f"lr{lr:g}")
        if os.path.exists(os.path.join(folder, "results.json")):
            runs[folder] = _read(folder)
            continue
        start = time.time()
        runs[folder] = run(config_cls(
            output_dir=folder, init_checkpoint=pretrained, learning_rate=lr,
            max_seq_length=setup["max_seq_length"], train_batch_size=setup["batch_size"],
            num_train_epochs=setup["epochs"], max_train_examples=setup["max_train_examples"],
            max_eval_examples=setup["max_eval_examples"], seed=seed, verbose=2, **task_args))
        runs[folder]["seconds"] = round(time.time() - start)
        _note_seconds(folder, runs[folder]["seconds"])
    best = max(runs, key=lambda f: runs[f]["dev"][setup["metric"]])
    by_rate = {f"{lr:g}": runs[os.path.join(out, f"lr{lr:g}")]["dev"][setup["metric"]]
               for lr in learning_rates}
    return best, {**runs[best], "dev_by_learning_rate": by_rate,
                  "learning_rate": runs[best]["train"]["learning_rate"]}


def pretrain_student(config_file: str, out: str, steps: int) -> str:
    """The student shape pretrained by run_pretraining.py on the built-in data with the
    teacher's schedule (warmup 30% of the steps); its model/ (reused when it is there)."""
    model = os.path.join(out, "model")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([sys.executable, "run_pretraining.py", f"--bert_config_file={config_file}",
                        f"--num_train_steps={steps}", f"--num_warmup_steps={int(0.3 * steps)}",
                        f"--output_dir={out}"], cwd=REPO_ROOT, check=True)
    return model


def run_student(task: str, variant: str, teacher_dir: str, student: dict[str, str], out: str,
                seed: int, setup: dict[str, Any]) -> dict[str, Any]:
    """One student variant through run_distill (results.json read if the run is there)."""
    from tfbert.tasks.distill import distill_config, run_distill

    if os.path.exists(os.path.join(out, "results.json")):
        return _read(out)
    task_args = {"task_name": "sentiment" if task == "sentiment" else "people_daily"}
    start = time.time()
    result = run_distill(distill_config(
        teacher_dir, output_dir=out, **student,
        max_seq_length=setup["max_seq_length"], train_batch_size=setup["batch_size"],
        num_train_epochs=setup["student_epochs"],
        max_train_examples=setup["max_train_examples"],
        max_eval_examples=setup["max_eval_examples"], seed=seed, verbose=2, **task_args,
        **setup["variants"][variant]))
    result["seconds"] = round(time.time() - start)
    _note_seconds(out, result["seconds"])
    return result


def _note_seconds(out: str, seconds: int) -> None:
    """The run's wall time beside its results.json (read back on resume)."""
    write_json(os.path.join(out, "bench_seconds.json"), {"seconds": seconds})


def _read(out: str) -> dict[str, Any]:
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        result = json.load(f)
    seconds = os.path.join(out, "bench_seconds.json")
    if os.path.exists(seconds):
        with open(seconds, encoding="utf-8") as f:
            result["seconds"] = json.load(f)["seconds"]
    return result


def deployment_rows(task: str, models: dict[str, str], work_dir: str,
                    max_examples: int | None, latency_runs: int) -> list[dict[str, Any]]:
    """Size, batch-1 latency and test score of each model (name -> model folder) as Keras,
    SavedModel, TFLite float32 and int8 (ids in)."""
    from bench.model_scores import saved_model_row, study_task
    from tfbert.export import load_for_export
    from tfbert.models.students import model_parameters

    rows = []
    for name, model_dir in models.items():
        scores = study_task(task, model_dir, os.path.join(work_dir, task, "tflite", name),
                            ("float32", "int8"), ("ids",), max_examples, latency_runs, None)
        saved = saved_model_row(model_dir, os.path.join(work_dir, task, "saved_models", name,
                                                        "1"), latency_runs)
        model = load_for_export(model_dir)[0]
        by_kind = {("keras" if r["file"] == "Keras" else f"tflite_{r['quantization']}"): r
                   for r in scores}
        rows.append({"task": task, "model": name, "model_dir": model_dir,
                     "parameters": model_parameters(model)["total"],
                     "saved_model": saved,
                     **{kind: {k: r[k] for k in ("bytes", "latency_ms", "latency_min_ms",
                                                 "score", "agreement", "difference")}
                        for kind, r in by_kind.items()}})
    return rows


def student_rows(task: str, metric: str, teacher: dict[str, Any],
                 students: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The scores table's rows: the teacher, then each student variant."""
    rows = [{"task": task, "model": "teacher", "variant": None,
             "learning_rate": teacher.get("learning_rate"),
             "dev": teacher["dev"][metric], "test": teacher["test"][metric],
             "seconds": teacher.get("seconds")}]
    for variant, result in students.items():
        rows.append({"task": task, "model": "student", "variant": variant,
                     "dev": result["dev"][metric], "test": result["test"][metric],
                     "kept_test": result["kept"]["test"], "kept_dev": result["kept"]["dev"],
                     "teacher_test": result["teacher"]["test"][metric],
                     "parameters": result["parameters"], "seconds": result.get("seconds"),
                     "rows": result["data"]})
    return rows


def markdown(record: dict[str, Any]) -> str:
    """The record's two tables (scores, deployment) as Markdown."""
    lines = ["| task | model | dev | test | share of the teacher's test score | parameters | "
             "seconds |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in record["scores"]:
        name = (f"student: {VARIANT_NAMES[r['variant']]}" if r["model"] == "student" else
                "teacher" + (f" (learning rate {r['learning_rate']:g})"
                             if r.get("learning_rate") else ""))
        params = (f"{r['parameters']['student']:,} ({r['parameters']['student_share']:.1%})"
                  if r["model"] == "student" else f"{record['teacher_parameters'][r['task']]:,}")
        kept = f"{r['kept_test']:.1%}" if r.get("kept_test") is not None else ""
        lines.append(f"| {r['task']} | {name} | {100 * r['dev']:.2f} | {100 * r['test']:.2f} | "
                     f"{kept} | {params} | {r['seconds'] or ''} |")
    lines += ["", "| task | model | parameters | SavedModel MB | TFLite float32 / int8 MB | "
              "batch-1 ms: Keras / SavedModel / TFLite float32 / TFLite int8 | test: float / "
              "TFLite int8 |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in record["deployment"]:
        ms = " / ".join(f"{x['latency_ms']:.2f}" for x in (
            r["keras"], r["saved_model"], r["tflite_float32"], r["tflite_int8"]))
        lines.append(
            f"| {r['task']} | {r['model']} | {r['parameters']:,} | "
            f"{r['saved_model']['bytes'] / 2**20:.1f} | {r['tflite_float32']['bytes'] / 2**20:.1f}"
            f" / {r['tflite_int8']['bytes'] / 2**20:.1f} | {ms} | {r['keras']['score']:.2f} / "
            f"{r['tflite_int8']['score']:.2f} ({r['tflite_int8']['difference']:+.2f}) |")
    return "\n".join(lines) + "\n"


def run(pretrained: str, work_dir: str, tasks: Sequence[str], variants: Sequence[str],
        seed: int, quick: bool = False, teacher_learning_rates: Sequence[float] = (1e-4,),
        student_checkpoint: str | None = None, student_pretraining_steps: int = 0
        ) -> dict[str, Any]:
    from tfbert.config import BertConfig
    from tfbert.export import load_for_export
    from tfbert.models.students import model_parameters

    os.makedirs(work_dir, exist_ok=True)
    teacher_config = BertConfig.from_json_file(os.path.join(pretrained, "config.json"))
    student = dataclasses.replace(teacher_config, **STUDENT)
    student_file = os.path.join(work_dir, "student_config.json")
    student.to_json_file(student_file)
    if student_checkpoint is None and student_pretraining_steps and not quick:
        student_checkpoint = pretrain_student(student_file,
                                              os.path.join(work_dir, "student_pretrain"),
                                              student_pretraining_steps)
    if student_checkpoint is not None:
        made = BertConfig.from_json_file(os.path.join(student_checkpoint, "config.json"))
        shape = {k: getattr(made, k) for k in STUDENT}
        if shape != STUDENT:
            raise SystemExit(f"distill: --student_checkpoint {student_checkpoint} has the shape "
                             f"{shape}, not the table's student {STUDENT}")
    student_args = ({"student_checkpoint": student_checkpoint} if student_checkpoint
                    else {"student_config_file": student_file})
    folder = "" if student_checkpoint else "random_init_"  # a variant's run folder: prefix
    record: dict[str, Any] = {"scores": [], "deployment": [], "teacher_parameters": {},
                              "load_average": {"start": load_average()}, "phases": {},
                              "settings": {}}
    for task in tasks:
        setup = record["settings"][task] = settings(task, quick)
        record["phases"][f"{task} teacher"] = time.strftime("%H:%M:%S")
        teacher_dir, teacher = run_teacher(task, pretrained, os.path.join(work_dir, task,
                                                                          "teacher"),
                                           seed, setup, teacher_learning_rates)
        record["teacher_learning_rates"] = {**record.get("teacher_learning_rates", {}), task: {
            "chosen": teacher["learning_rate"], "dev": teacher["dev_by_learning_rate"]}}
        record["teacher_parameters"][task] = model_parameters(
            load_for_export(teacher_dir)[0])["total"]
        students = {}
        for variant in variants:
            record["phases"][f"{task} {variant}"] = time.strftime("%H:%M:%S")
            students[variant] = run_student(task, variant, teacher_dir, student_args,
                                            os.path.join(work_dir, task, folder + variant), seed,
                                            setup)
            print(f"{task} {variant}: {students[variant]['kept']}", flush=True)
        record["scores"] += student_rows(task, setup["metric"], teacher, students)
        best = max(students, key=lambda v: students[v]["dev"][setup["metric"]])
        record["best"] = {**record.get("best", {}), task: best}
        record["phases"][f"{task} deployment"] = time.strftime("%H:%M:%S")
        record["load_average"][f"{task} deployment"] = load_average()
        record["deployment"] += deployment_rows(
            task, {"teacher": teacher_dir,
                   f"student ({best})": os.path.join(work_dir, task, folder + best)},
            work_dir, setup["max_eval_examples"], setup["latency_runs"])
    record["load_average"]["end"] = load_average()
    record["student_config"] = STUDENT
    record["student_init"] = student_checkpoint or "random"
    record["quick"] = quick
    return record


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", required=True,
                        help="the teacher's pretrained checkpoint (a run_pretraining model/)")
    parser.add_argument("--work_dir", default="output/distill_table")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help=f"of {list(VARIANTS)}")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--teacher_learning_rates", default="1e-4,3e-4,1e-3",
                        help="the teacher is fine-tuned at each; the best on dev is kept")
    parser.add_argument("--student_checkpoint", default=None,
                        help="the pretrained student (a run_pretraining.py model/ of STUDENT's "
                        "shape and the teacher's vocab); default: pretrain one")
    parser.add_argument("--student_pretraining_steps", type=int, default=10000,
                        help="steps of the student's pretraining (0, or --quick: random "
                        "initialisation)")
    parser.add_argument("--quick", action="store_true",
                        help="a few hundred examples, one epoch: checks the run, not figures")
    parser.add_argument("--output", default=None, help="the JSON record (default: "
                        "bench/results/distill-MACHINE-DATE.json)")
    args = parser.parse_args(argv)
    tasks, variants = args.tasks.split(","), args.variants.split(",")
    unknown = sorted(set(tasks) - set(TASKS)) + sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"distill: unknown task or variant {unknown}; tasks {list(TASKS)}, "
                         f"variants {list(VARIANTS)}")
    if not os.path.exists(os.path.join(args.pretrained, "config.json")):
        raise SystemExit(f"distill: --pretrained {args.pretrained}: no config.json there")
    output = new_results_file("distill", args.output)
    date = datetime.date.today().isoformat()
    record = run(args.pretrained, args.work_dir, tasks, variants, args.seed, args.quick,
                 [float(x) for x in args.teacher_learning_rates.split(",")],
                 args.student_checkpoint, args.student_pretraining_steps)
    command = " ".join(["python -m bench.distill", *(sys.argv[1:] if argv is None else argv)])
    record = {"machine": machine_name(), "date": date, "command": command,
              "cpu_count": os.cpu_count(), "isa": isa_record(), **record}
    record["markdown"] = markdown(record)
    write_json(output, record)
    print(record["markdown"])
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
