"""Does the default decay form change fine-tuning quality? The demo's fine-tuning (built-in
`sentiment`, the first 1,000 training reviews, max_seq_length 64, 4 epochs, batch 32, the
default learning rate for the model, the best dev epoch kept) from each given pretrained
checkpoint, under `--lr_schedule=polynomial` (google-research/bert's decay, the default) and
`--lr_schedule=linear` (transformers'), over several seeds; prints dev and test accuracy per
run and the mean and spread per (checkpoint, schedule), and writes them as JSON.

    python -m experiments.schedule_choice --checkpoints A=output/pretrain_default/model \
        [--checkpoints B=other/model] [--seeds 1,2,3] [--output bench/results/NAME.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", action="append", required=True,
                        help="NAME=PATH of a pretrained model directory (repeatable)")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--output", default=None, help="JSON file to write (optional)")
    args = parser.parse_args()
    if args.output and os.path.exists(args.output):
        parser.error(f"{args.output} exists; name a new file")

    from tfbert.fileio import write_json
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    runs = []
    with tempfile.TemporaryDirectory() as root:
        for entry in args.checkpoints:
            name, path = entry.split("=", 1)
            for schedule in ("polynomial", "linear"):
                for seed in (int(s) for s in args.seeds.split(",")):
                    out = os.path.join(root, f"{name}-{schedule}-{seed}")
                    result = run_classification(ClassificationConfig(
                        task_name="sentiment", output_dir=out, init_checkpoint=path,
                        max_train_examples=1000, max_seq_length=64, num_train_epochs=4.0,
                        train_batch_size=32, seed=seed, lr_schedule=schedule, verbose=0))
                    run = {"checkpoint": name, "lr_schedule": schedule, "seed": seed,
                           "dev_accuracy": result["dev"]["accuracy"],
                           "test_accuracy": result["test"]["accuracy"]}
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    summary = []
    print("| checkpoint | lr_schedule | dev accuracy (mean, min-max) | test accuracy (mean, "
          "min-max) |")
    print("|---|---|---|---|")
    for entry in args.checkpoints:
        name = entry.split("=", 1)[0]
        for schedule in ("polynomial", "linear"):
            mine = [r for r in runs if r["checkpoint"] == name and r["lr_schedule"] == schedule]
            row = {"checkpoint": name, "lr_schedule": schedule}
            cells = []
            for split in ("dev", "test"):
                values = [r[f"{split}_accuracy"] for r in mine]
                row.update({f"{split}_mean": statistics.mean(values), f"{split}_min": min(values),
                            f"{split}_max": max(values)})
                cells.append(f"{statistics.mean(values):.4f} ({min(values):.4f}-"
                             f"{max(values):.4f})")
            summary.append(row)
            print(f"| {name} | {schedule} | {cells[0]} | {cells[1]} |")
    if args.output:
        record = {"command": "python -m experiments.schedule_choice " + " ".join(
                      f"--checkpoints {c}" for c in args.checkpoints) + f" --seeds {args.seeds}",
                  "host": f"{os.cpu_count()}-core {platform.processor() or platform.machine()}",
                  "runs": runs,
                  "summary": summary}
        write_json(args.output, record)


if __name__ == "__main__":
    main()
