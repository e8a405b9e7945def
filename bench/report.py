"""docs/results.md from bench/results/*.json: every measured table, each under the command that
wrote its JSON and the host it ran on (as the JSON records it).

    python -m bench.report [--out docs/results.md]

Each file of bench/results/ becomes one section, in the order of SECTIONS (files no section
names come last, under "Other results"). A JSON with a "benchmarks" object (the suite's
`python -m bench.run` file) gives one table per benchmark and its ratios; a quality file
(`python -m bench.quality`) gives the quality table as bench.quality prints it; any other
object gives one table per level: its scalar fields as `field | value`, a field whose value is
an object of scalars as one row of a table, a list of records as a table. Numbers are written
with 4 significant digits. tests/test_results_doc.py checks that the committed file is what
this command writes.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
from collections.abc import Iterable
from typing import Any

from bench.quality import SETUPS, Setup, markdown

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results")
OUT = os.path.join(REPO, "docs", "results.md")
HOST_WORDS = ("avx", "2cpu", "vm")  # where a results file name's host tag starts
LONGEST_LIST = 12  # a longer list of numbers is summarised (its first and last value)

# (section title, [(JSON file in bench/results/, the command that wrote it)])
SECTIONS: list[tuple[str, list[tuple[str, str]]]] = [
    ("The benchmark suite (`make bench`)", [
        ("vm-2cpu-2026-11-30.json",
         "python -m bench.run --quick --only inference --rounds 2; python -m bench.run "
         "--bfloat16 --only pretrain; python -m bench.run --quick --only "
         "tokenizer,pipeline,scaling"),
    ]),
    ("tfbert-chinese's shape at fixed compute", [
        ("shape_study-avx512-epyc-zen4-2026-12-07.json",
         "python -m experiments.shape_study --output_dir=output/shape_study "
         "(its shape_study.json)"),
    ]),
    ("The built-in default pretraining", [
        ("pretrain_default-avx2-epyc.json", "python run_pretraining.py"),
        ("pretrain_recipe-avx2-epyc-2026-12-01.json",
         "python -m experiments.pretrain_recipe --output_dir=output/pretrain_recipe"),
        ("mlm_dynamics-2cpu-2026-11-30.json", "python -m experiments.mlm_dynamics"),
    ]),
    ("Fine-tuning quality: does pretraining help?", [
        ("quality-sentiment_1000-amx-xeon-2026-12-07.json",
         "python -m bench.quality --pretrained=tfbert-chinese --setups=sentiment_1000 "
         "--only=baseline,random_init --output_dir=output/q_rand; python -m bench.quality "
         "--pretrained=tfbert-chinese --setups=sentiment_1000 --only=pretrained "
         "--output_dir=output/q_pre (the two files' rows in one)"),
        ("quality-sentiment-avx512-epyc-zen4-2026-12-07.json",
         "python -m bench.quality --setups=sentiment,sentiment_1000 --only=baseline "
         "--output_dir=output/q_base; python -m bench.quality --pretrained=tfbert-chinese "
         "--setups=sentiment --only=pretrained --output_dir=output/q_sent (the sentiment rows "
         "of the two files in one)"),
        ("quality-ner-avx512-epyc-zen4-2026-12-07.json",
         "python -m bench.quality --pretrained=tfbert-chinese --setups=ner "
         "--only=baseline,pretrained --output_dir=output/q_ner"),
    ]),
    ("Probing the layers (`python -m tfbert.probe`)", [
        ("probe-tfbert-chinese-avx512-epyc-zen4-2026-12-07.json",
         "python -m tfbert.probe --model=tfbert-chinese --output_dir=output/probe "
         "--attention=\"中国人民银行今天宣布降低利率。\" (its probe.json)"),
        ("probe-tfbert-chinese-l2-0.001-avx512-epyc-zen4-2026-12-07.json",
         "python -m tfbert.probe --model=tfbert-chinese --output_dir=output/probe --l2=0.001 "
         "(its probe.json)"),
        ("probe_l2-avx512-epyc-zen4-2026-12-07.json",
         "python -m experiments.probe_l2 --model=tfbert-chinese --out=FILE"),
    ]),
    ("Fine-tuning kits", [
        ("classifier_kit-avx2-epyc-2026-12-01.json",
         "python -m experiments.classifier_kit --output_dir=output/classifier_kit"),
        ("classifier_kit-multilabel-6ep-avx2-epyc-2026-12-01.json",
         "python -m experiments.classifier_kit --output_dir=output/classifier_kit "
         "--only=multi_label --num_train_epochs=6"),
        ("ner_kit-avx2-epyc-2026-12-01.json",
         "python -m experiments.ner_kit --output_dir=output/ner_kit"),
        ("grid_sentiment-avx2-epyc-2026-12-01.json", "python -m experiments.grid_sentiment"),
    ]),
    ("Serving latency by host (`bench.bench_inference`)", [
        ("inference-quiet-avx2-epyc-2026-12-01.json",
         "python -m bench.bench_inference --quick --rounds 3 --float32 --families "
         "tfbert,keras-hub,onnxruntime --results FILE"),
        ("inference-target-avx2-epyc-2026-12-01.json",
         "python -m bench.bench_inference --quick --rounds 3 --float32 --results FILE"),
        ("inference-avx2-epyc-2026-12-01-before.json",
         "python -m bench.bench_inference --quick --float32 --results FILE"),
        ("inference-avx2-epyc-2026-12-01-after.json",
         "python -m bench.bench_inference --quick --float32 --results FILE"),
        ("inference-emulated-avx2-on-avx512-epyc-2026-12-02.json",
         "python -m bench.bench_inference --quick --rounds 3 --float32 --emulate_avx2 "
         "--families tfbert,keras-hub --results FILE"),
        ("inference-quiet-avx512-epyc-2026-12-02.json",
         "python -m bench.bench_inference --quick --rounds 3 --float32 --families "
         "tfbert,keras-hub,onnxruntime --results FILE"),
        ("inference-streams-avx512-epyc-2026-12-02.json",
         "python -m bench.bench_inference --quick --rounds 3 --float32 --families "
         "tfbert,tfbert-streams,onnxruntime --results FILE"),
        ("inference-quiet-avx512-epyc-zen4-2026-12-02.json",
         "python -m bench.bench_inference --quick --rounds 3 --float32 --families "
         "tfbert,tfbert-streams,keras-hub,onnxruntime --results FILE"),
        ("inference-streams-avx512-epyc-zen4-2026-12-02.json",
         "python -m bench.bench_inference --quick --rounds 5 --float32 --families "
         "tfbert,tfbert-streams,onnxruntime --results FILE"),
        ("inference-ceiling-avx512-epyc-zen5-2026-12-02.json",
         "python -m bench.bench_inference --quick --rounds 3 --float32 --families "
         "tfbert,tfbert-streams,keras-hub,onnxruntime --results FILE"),
    ]),
    ("Serving A/Bs", [
        ("serve-ab-avx2-forms-onnx-avx512-epyc-zen4-2026-12-02.json",
         "python -m experiments.ab_serve --rounds 20 --forms avx2 --onnx --results FILE"),
        ("serve-ab-avx2-forms-onnx-rerun-avx512-epyc-zen4-2026-12-02.json",
         "python -m experiments.ab_serve --rounds 20 --forms avx2 --onnx --results FILE"),
        ("serving-ab-before-after-avx2-epyc-zen3-2026-12-03.json",
         "python -m experiments.ab_versions --before CHECKOUT --serve --results FILE"),
    ]),
    ("Pretraining step by host (`bench.bench_pretrain`)", [
        ("pretrain-quiet-avx2-epyc-2026-12-01.json",
         "python -m bench.bench_pretrain --quick --results FILE"),
        ("pretrain-avx2-epyc-2026-12-01.json",
         "python -m bench.bench_pretrain --quick --results FILE"),
        ("pretrain-isa-avx2-epyc-2026-12-01.json",
         "python -m bench.bench_pretrain --quick --results FILE"),
        ("pretrain-emulated-avx2-on-avx512-epyc-2026-12-02.json",
         "python -m bench.bench_pretrain --quick --emulate_avx2 --results FILE"),
        ("pretrain-quiet-avx512-epyc-2026-12-02.json",
         "python -m bench.bench_pretrain --quick --bfloat16 --results FILE"),
    ]),
    ("The built-in default's train step (`experiments.ab_pretrain_builtin`)", [
        ("pretrain-builtin-xla-avx2-epyc-2026-12-01.json",
         "python -m experiments.ab_pretrain_builtin --rounds 30 --results FILE"),
        ("pretrain-builtin-xla-avx512-epyc-2026-12-02.json",
         "python -m experiments.ab_pretrain_builtin --rounds 30 --results FILE"),
        ("pretrain-builtin-one-device-avx512-epyc-2026-12-02.json",
         "python -m experiments.ab_pretrain_builtin --rounds 30 --one_device --results FILE"),
        ("pretrain-builtin-bf16-avx512-epyc-2026-12-02.json",
         "python -m experiments.ab_pretrain_builtin --rounds 30 --bfloat16 --results FILE"),
        ("pretrain-builtin-bf16-xla-avx512-epyc-zen4-2026-12-02.json",
         "python -m experiments.ab_pretrain_builtin --rounds 30 --bfloat16 --results FILE"),
        ("pretrain-builtin-optimizers-avx512-epyc-zen4-2026-12-02.json",
         "python -m experiments.ab_pretrain_builtin --rounds 30 --optimizers --results FILE"),
        ("train-ab-before-after-avx2-epyc-zen3-2026-12-03.json",
         "python -m experiments.ab_versions --before CHECKOUT --train --results FILE"),
        ("train-ab-summed-rows-avx2-epyc-zen3-2026-12-03.json",
         "python -m experiments.ab_versions --before CHECKOUT --train --results FILE"),
        ("train-ab-sparse-clip-avx512-epyc-zen4-2026-12-04.json",
         "python -m experiments.ab_versions --before CHECKOUT --train --rounds 10 --steps 20 "
         "--results FILE"),
        ("schedule_choice-avx2-epyc-zen3-2026-12-03.json",
         "python -m experiments.schedule_choice --checkpoints NAME=DIR ... --seeds 1,2,3 "
         "--output FILE"),
    ]),
    ("The fit loop and its feed", [
        ("fit_loop-avx512-epyc-2026-12-02.json", "python -m experiments.fit_loop --results FILE"),
        ("fit_loop-strategy-avx512-epyc-2026-12-02.json",
         "python -m experiments.fit_loop --variants live,default_strategy --results FILE"),
        ("fit_loop-strategy-rerun-avx512-epyc-2026-12-02.json",
         "python -m experiments.fit_loop --variants live,default_strategy --results FILE"),
        ("fit_feed-avx512-epyc-zen4-2026-12-02.json",
         "python -m experiments.fit_feed --rounds 6 --chunk 40 --run --results FILE"),
        ("fit_feed-default-strategy-avx512-epyc-zen4-2026-12-02.json",
         "python -m experiments.fit_feed --default_strategy --results FILE"),
        ("fit_feed-stream-options-avx512-epyc-zen4-2026-12-02.json",
         "python -m experiments.fit_feed --run --results FILE"),
        ("fit_feed-stream-options-rerun-avx512-epyc-zen4-2026-12-02.json",
         "python -m experiments.fit_feed --run --results FILE"),
    ]),
    ("Fine-tuning at the length of the data (`bench.bench_finetune`)", [
        ("finetune-quick-avx2-epyc-zen3-2026-12-03.json",
         "python -m bench.bench_finetune --quick --torch_python PY --results FILE"),
        ("finetune-throughput-avx512-epyc-zen4-2026-12-03.json",
         "python -m bench.bench_finetune --quick --no_curves --torch_python PY --results FILE"),
        ("finetune-throughput-builtin-avx512-epyc-zen4-2026-12-04.json",
         "python -m bench.bench_finetune --shapes builtin --torch_python PY --results FILE"),
        ("finetune_step_cost-builtin-avx512-epyc-zen4-2026-12-04.json",
         "python -m experiments.finetune_step_cost --rounds 5 --steps 20 --output FILE"),
        ("finetune_step_cost-bert-base-avx512-epyc-zen4-2026-12-04.json",
         "python -m experiments.finetune_step_cost --rounds 1 --steps 2 --warm 1 "
         "--shape bert-base --output FILE"),
    ]),
    ("Distillation and int8 TFLite", [
        ("distill-avx512-epyc-zen4-2026-12-03.json",
         "python -m bench.distill --pretrained=output/teacher/pretrain_mini/model "
         "--work_dir=output/distill_table --tasks=ner,sentiment --teacher_learning_rates=3e-4,1e-3 "
         "--student_checkpoint=output/student/pretrain_4l96/model --output=FILE"),
        ("int8_study-vm-2cpu-2026-12-03.json",
         "python -m experiments.int8_study --sentiment_model=output/demo/pretrained/model "
         "--ner_model=output/int8_dev/ner/model --ner_crf_model=output/int8_dev/ner_crf/model "
         "--work_dir=output/int8_dev/study --output=FILE"),
    ]),
    ("Sentence embeddings: search at 10k and 100k passages", [
        ("search_scale-avx2-epyc-zen3-2026-12-03.json",
         "python -m experiments.search_scale --model_dir=output/embedding_study/qa_default/model "
         "--sizes=10000,100000 --output=FILE"),
    ]),
]


def number(value: Any) -> str:
    """One cell: 4 significant digits for floats, thousands separators for large ints."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        if len(value) > LONGEST_LIST:
            return f"{len(value)} values: {number(value[0])} ... {number(value[-1])}"
        return "[" + ", ".join(number(v) for v in value) + "]"
    return str(value).replace("|", "\\|").replace("\n", " ")


def is_leaf(value: Any) -> bool:
    """A value written in one cell: a scalar, or a list of such values."""
    if isinstance(value, list):
        return all(is_leaf(v) for v in value)
    return not isinstance(value, dict)


def table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(number(c) for c in row) + " |" for row in rows]
    return lines + [""]


def columns(records: Iterable[dict[str, Any]]) -> list[str]:
    """The leaf fields of `records`, in order of first appearance."""
    names: dict[str, None] = {}
    for record in records:
        names.update((k, None) for k, v in record.items() if is_leaf(v))
    return list(names)


def record_table(records: list[dict[str, Any]], first: str | None = None) -> list[str]:
    """A list of records as one table (with `first`: each record's key as the first column)."""
    names = [c for c in columns(records) if c != first]
    header = ([first] if first else []) + names
    return table(header, [([r.get(first)] if first else []) + [r.get(n) for n in names]
                          for r in records])


def render(obj: dict[str, Any], title: str = "") -> list[str]:
    """`obj` as tables, one per level (see the module docstring)."""
    lines: list[str] = []
    scalars = [(k, v) for k, v in obj.items() if is_leaf(v)]
    records = {k: v for k, v in obj.items()
               if isinstance(v, dict) and v and all(is_leaf(x) for x in v.values())}
    if title and (scalars or records):
        lines += [f"**{title}**", ""]
    if scalars:
        lines += table(["field", "value"], scalars)
    if records:
        lines += record_table([{"key": k, **v} for k, v in records.items()], "key")
    for key, value in obj.items():
        name = f"{title} / {key}" if title else key
        if isinstance(value, dict) and key not in records:
            lines += render(value, name)
        elif (isinstance(value, list) and value and not is_leaf(value)
              and all(isinstance(v, dict) for v in value)):
            lines += [f"**{name}**", ""] + record_table(value)
    return lines


def host(data: dict[str, Any], name: str) -> str:
    """The host as the JSON records it."""
    isa = data.get("isa")
    if isinstance(isa, dict):
        flags = isa.get("flags") or {}
        have = [name for name in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
                if flags.get(name)]
        emulated = f", emulating {isa['emulated']}" if isa.get("emulated") else ""
        return f"{isa.get('model_name')} ({isa.get('kind')}: {', '.join(have)}){emulated}"
    for key in ("host", "cpu", "machine"):
        if data.get(key):
            cpus = f", {data['cpus']} cores" if data.get("cpus") else ""
            return f"{data[key]}{cpus}"
    return f"not recorded in the JSON; its name says {name_tag(name)}"


def name_tag(name: str) -> str:
    """The host part of a results file name: from its first host word to the date."""
    words = re.sub(r"-?\d{4}-\d{2}-\d{2}.*", "", name.removesuffix(".json")).split("-")
    start = next((i for i, w in enumerate(words) if w.startswith(HOST_WORDS)), len(words))
    return "-".join(words[start:]) or name


def suite_tables(data: dict[str, Any]) -> list[str]:
    """The suite's file: one table per benchmark, then its ratios."""
    lines = [f"float32 matmul peak {number(data.get('matmul_peak_gflops'))} GFLOP/s; "
             f"quick: {number(data.get('quick'))}", ""]
    for name, result in data["benchmarks"].items():
        lines += [f"**{name}**", ""]
        if "time_to_accuracy" in result:
            lines += finetune_tables(result)
            continue
        config = result.get("config")
        if isinstance(config, dict):
            lines += [", ".join(f"{k} {number(v)}" for k, v in config.items()), ""]
        lines += record_table([{k: v for k, v in r.items() if k != "benchmark"}
                               for r in result.get("rows", [])])
        if result.get("ratios"):
            lines += table(["ratio", "value"], result["ratios"].items())
    return lines


def finetune_tables(result: dict[str, Any]) -> list[str]:
    """`bench.bench_finetune`'s result: its settings and shapes, examples/s of every system and
    shape, time to the same dev accuracy, the ratios, and when each phase started with the
    load average then."""
    config = result.get("config") or {}
    lines = [", ".join(f"{k} {number(v)}" for k, v in config.items() if is_leaf(v)), ""]
    if isinstance(config.get("shapes"), dict):
        lines += record_table([{"shape": k, **v} for k, v in config["shapes"].items()])
    lines += ["Examples/s (medians of the interleaved repetitions):", ""]
    lines += table(["shape", "system", "training examples/s", "evaluation examples/s"],
                   [[r.get("shape"), r.get("system"), r.get("train_examples_per_s"),
                     r.get("eval_examples_per_s", r.get("error"))]
                    for r in result.get("rows", [])])
    accuracy = result.get("time_to_accuracy") or {}
    if accuracy.get("rows"):
        chance = accuracy.get("majority_class_accuracy")
        among = ("the lowest of the systems' best" if chance is None else
                 f"the lowest best of the systems that learned: above {number(chance)}, the "
                 "dev set's majority-class share")
        lines += [f"Time to dev accuracy {number(accuracy.get('target_dev_accuracy'))} ({among}),"
                  " built-in shape; training seconds, dev scoring left out:", ""]
        lines += table(["system", "best dev accuracy", "learned", "time to target (s)", "step",
                        "all epochs (s)", "dev accuracy at each score"],
                       [[r["system"], r.get("best_dev_accuracy"), r.get("learned", "-"),
                         r.get("time_to_target_s"), r.get("step_at_target"), r.get("train_s"),
                         r.get("dev_accuracy_curve")] for r in accuracy["rows"]])
    errors = accuracy.get("errors") or []
    if errors:
        lines += table(["system", "error"], [[e["system"], e["error"]] for e in errors])
    if result.get("ratios"):
        lines += table(["ratio", "value"], result["ratios"].items())
    loads, started = result.get("load_average"), result.get("phase_start_s") or {}
    if isinstance(loads, dict):
        lines += table(["phase", "started (s)", "load average (1, 5, 15 min)"],
                       [[phase, started.get(phase), load] for phase, load in loads.items()])
    return lines


def quality_tables(data: dict[str, Any]) -> list[str]:
    order = [n for n in SETUPS if n in data["setups"]]  # (the file's keys are sorted)
    order += [n for n in data["setups"] if n not in order]
    setups = {name: Setup(**data["setups"][name]) for name in order}
    return markdown(data["rows"], setups).splitlines() + [""]


def section(name: str, command: str) -> list[str]:
    """One file's tables under its command and host."""
    with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
        data = json.load(f)
    command = command.replace("FILE", f"bench/results/{name}")
    lines = [f"### {name}", "", f"Command: `{command}`", "", f"Host: {host(data, name)}", ""]
    if "benchmarks" in data:
        return lines + suite_tables(data)
    if "setups" in data and "rows" in data:
        return lines + quality_tables(data)
    if "time_to_accuracy" in data:
        return lines + finetune_tables(data)
    if "markdown" in data:  # a study that prints its own tables (bench.distill, int8_study)
        rest = {k: v for k, v in data.items() if k in ("load_average", "phases")}
        return lines + data["markdown"].rstrip("\n").splitlines() + [""] + render(rest)
    return lines + render({k: v for k, v in data.items() if k not in ("isa", "command")})


def guessed_command(name: str) -> str:
    """The command of a file no section names: the suite's, or the experiment its name starts
    with."""
    stem = name.split("-")[0]
    if os.path.exists(os.path.join(REPO, "experiments", f"{stem}.py")):
        return f"python -m experiments.{stem}"
    if os.path.exists(os.path.join(REPO, "bench", f"bench_{stem}.py")):
        return f"python -m bench.bench_{stem}"
    return "python -m bench.run"


def document() -> str:
    """The whole of docs/results.md."""
    lines = ["# Measured results", "",
             "Generated by `python -m bench.report` from bench/results/*.json; do not edit by "
             "hand. Each table names the command that wrote its JSON and the host the JSON "
             "records. docs/performance.md says which decision each figure supports.", ""]
    named = set()
    for title, files in SECTIONS:
        lines += [f"## {title}", ""]
        for name, command in files:
            named.add(name)
            lines += section(name, command)
    others = sorted(os.path.basename(p) for p in glob.glob(os.path.join(RESULTS, "*.json"))
                    if os.path.basename(p) not in named)
    if others:
        lines += ["## Other results", ""]
        for name in others:
            lines += section(name, guessed_command(name))
    return "\n".join(lines).rstrip("\n") + "\n"


def write(path: str = OUT) -> str:
    """Writes the document to `path` atomically (a temporary file renamed into place)."""
    text = document()
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT, help="where to write (default docs/results.md)")
    args = parser.parse_args(argv)
    text = write(args.out)
    print(f"wrote {args.out}: {text.count(chr(10))} lines")


if __name__ == "__main__":
    main()
