"""How closely tfbert's training follows google-research/bert's own run (the table of
docs/performance.md, "Training as google-research/bert trains").

For each run of the committed oracle (tests/data/google_training/, made by
tests/make_google_training_golden.py: fine-tuning at 2e-5 and 1e-3, pretraining at 5e-5 and
1e-3, 100 steps each from the same checkpoint on the same batches) and each optimizer, trains
tfbert as tests/test_google_training.py does and prints the largest relative per-step loss
difference over all steps (and its step), that over the first 30, and the largest absolute
difference of the final weights the fixture holds.

    python experiments/google_training_agreement.py [--optimizers adamw_google,adamw]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))

import test_google_training as t  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimizers", default="adamw_google,adamw")
    args = parser.parse_args()
    golden_weights = np.load(os.path.join(t.GOLDEN_DIR, "final_weights.npz"))
    print("| run | optimizer | loss, all steps (step) | loss, steps 0-30 | final weights |")
    print("|---|---|---|---|---|")
    for name, run in t.GOLDEN["runs"].items():
        kind, rate = name.split("_lr")[0], float(name.split("_lr")[1])
        want = np.array(run["losses"])
        for optimizer in args.optimizers.split(","):
            model, losses = t._train(kind, rate, len(want), optimizer=optimizer)
            error = t._relative(losses, want)
            weights = t._google_weights(model, os.path.join(tempfile.mkdtemp(), "m"))
            weight_error = max(float(np.abs(weights[k.split(":", 1)[1]] - golden_weights[k]).max())
                               for k in golden_weights.files if k.startswith(name + ":"))
            print(f"| {name} | {optimizer} | {error.max():.2g} ({int(error.argmax())}) | "
                  f"{error[:31].max():.2g} | {weight_error:.2g} |", flush=True)


if __name__ == "__main__":
    main()
