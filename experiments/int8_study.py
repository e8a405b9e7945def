"""int8 TFLite against the float model on sentiment (accuracy) and People's Daily NER (entity F1).

Takes fine-tuned model folders (it fine-tunes nothing), exports each to TFLite at every
quantization of `tfbert.export.tflite` (ids-in and text-in models), scores the Keras float32
model and every file on the full test split, and writes a JSON record and a Markdown table:
size in bytes, batch-1 latency (median and fastest of --latency_runs calls on this CPU; TFLite
with its default one thread, the Keras model as a tf.function), test score, its difference to
the Keras float32 score in points, and agreement with the Keras model's predictions (texts for
sentiment, tokens' tags for NER).

    python -m experiments.int8_study --sentiment_model=output/demo/pretrained/model \\
        --ner_model=output/int8_dev/ner/model --ner_crf_model=output/int8_dev/ner_crf/model

The ids models read every window of a long sentence as run_ner does; the text models pack the
first window only (tfbert/export/tflite.py), so a NER task gets a second float row, the Keras
model on the first window of each sentence, and the text rows' "same inputs" difference and
agreement are against it (the ids rows' against the Keras model on all windows).

The .tflite files go to --work_dir/<task>/ (files tfbert wrote there before are replaced);
the record to --output (default bench/results/int8_study-<machine>-<date>.json, refused if it
exists), the table beside the files (--work_dir/int8_study.md) and on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from typing import Any

from bench.common import machine_name, new_results_file
from bench.model_scores import study_task
from tfbert.fileio import write_json, write_text

TASKS = {"sentiment": "sentiment_model", "ner": "ner_model", "ner_crf": "ner_crf_model"}
METRIC = {"sentiment": "accuracy %", "ner": "entity F1 %", "ner_crf": "entity F1 %"}


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as one Markdown table."""
    lines = ["| task | model | bytes | latency ms, median / fastest (batch 1) | test score | "
             "vs Keras float32 | vs float, same inputs | agrees with float, same inputs |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        model = ({"Keras": "Keras float32", "Keras, first window": "Keras float32, first "
                  "window only"}.get(r["file"])
                 or f"TFLite {r['inputs']}-in {r['quantization']}")
        lines.append(f"| {r['task']} ({METRIC[r['task']]}) | {model} | {r['bytes']:,} | "
                     f"{r['latency_ms']:.2f} / {r['latency_min_ms']:.2f} | {r['score']:.2f} | "
                     f"{r['difference']:+.2f} | {r['difference_same_inputs']:+.2f} | "
                     f"{r['agreement']:.2f}% |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    from tfbert.export.tflite import KINDS, QUANTIZATIONS

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for task, flag in TASKS.items():
        parser.add_argument(f"--{flag}", default=None,
                            help=f"fine-tuned {task} model folder (default: skip the task)")
    parser.add_argument("--quantizations", default=",".join(QUANTIZATIONS))
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--work_dir", default="output/int8_study",
                        help="where the .tflite files and the table go")
    parser.add_argument("--output", default=None,
                        help="the JSON record (default: bench/results/int8_study-MACHINE-DATE"
                             ".json)")
    parser.add_argument("--max_examples", type=int, default=None,
                        help="score the first N test examples only (default: all)")
    parser.add_argument("--latency_runs", type=int, default=200)
    parser.add_argument("--num_threads", type=int, default=None,
                        help="interpreter threads while scoring (default: TFLite's, one)")
    args = parser.parse_args(argv)
    models = {task: getattr(args, flag) for task, flag in TASKS.items() if getattr(args, flag)}
    if not models:
        raise SystemExit("int8_study: give at least one of "
                         + ", ".join(f"--{flag}" for flag in TASKS.values()))
    for task, model_dir in models.items():
        if not os.path.isdir(model_dir):
            raise SystemExit(f"int8_study: --{TASKS[task]} {model_dir}: no such folder")
    output = new_results_file("int8_study", args.output)
    date = datetime.date.today().isoformat()
    rows, load = [], [os.getloadavg()]
    for task, model_dir in models.items():
        rows += study_task(task, model_dir, args.work_dir, args.quantizations.split(","),
                           args.kinds.split(","), args.max_examples, args.latency_runs,
                           args.num_threads)
    load.append(os.getloadavg())
    table = markdown(rows)
    command = " ".join(["python -m experiments.int8_study",
                        *(sys.argv[1:] if argv is None else argv)])
    write_json(output, {"machine": machine_name(), "date": date, "command": command,
                        "cpu_count": os.cpu_count(), "load_average_start_end": load,
                        "rows": rows, "markdown": table})
    write_text(os.path.join(args.work_dir, "int8_study.md"), table)
    print(table)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
