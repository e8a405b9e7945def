"""python -m tfbert.probe --model=M --output_dir=D [--attention="一句话"]

Probes every layer of a model (embeddings, then each transformer layer) with one linear probe
per task: word segmentation, part of speech, entity type (People's Daily dev -> test) and
review sentiment (sentiment dev -> test), beside a random-init model of the same shape and
Hewitt & Liang's control task. Writes probe.json, probe.md, probe.png and attention_heads.png
(Clark et al.'s per-head statistics) into --output_dir, and with --attention one
attention_layer{L}.png per layer for that text. --output_dir must be new, empty or an earlier
probe run's folder (which this run replaces). A user's mistake is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tfbert.errors import run_cli
from tfbert.probe import run
from tfbert.probe.probes import DEFAULT_L2
from tfbert.probe.tasks import TASKS

PROG = "python -m tfbert.probe"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """The command line; a user's mistake is one line on stderr and exit status 2.

    Args:
        argv: list of str or None. The flags (None: sys.argv[1:]).
        prog: str. The command's name in --help and in error lines.
    """
    return run_cli(_main, argv, prog, prog=prog)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command's flags; every --help line states its default."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True,
                        help="any checkpoint tfbert reads: a shipped name (tfbert-chinese), a "
                             "Hugging Face or tfbert folder, a Google TF1 folder or prefix, a "
                             "run's output_dir (its model/) (required)")
    parser.add_argument("--output_dir", required=True,
                        help="where probe.json, probe.md and the PNGs go: new, empty, or an "
                             "earlier probe run's folder (required)")
    parser.add_argument("--attention", default=None,
                        help="a sentence whose attention maps to plot, one PNG per layer "
                             "(default: none)")
    parser.add_argument("--tasks", default=",".join(TASKS),
                        help="comma-separated probe tasks (default: %(default)s)")
    parser.add_argument("--max_train_sentences", type=int, default=1500,
                        help="probe-train size: People's Daily dev sentences, and as many "
                             "dev reviews (default: %(default)s)")
    parser.add_argument("--max_test_sentences", type=int, default=800,
                        help="probe-test size: test sentences and test reviews "
                             "(default: %(default)s)")
    parser.add_argument("--max_seq_length", type=int, default=128,
                        help="longest input in tokens; longer texts are cut (default: "
                             "%(default)s, or the model's max_position_embeddings if smaller)")
    parser.add_argument("--batch_size", type=int, default=32,
                        help="texts per forward pass (default: %(default)s)")
    parser.add_argument("--l2", type=float, default=DEFAULT_L2,
                        help="probes' L2 strength on the mean cross-entropy (default: "
                             "%(default)s)")
    parser.add_argument("--max_iter", type=int, default=100,
                        help="probes' lbfgs iterations (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random-init model, the control labels and the "
                             "probes (default: %(default)s)")
    parser.add_argument("--no_progress", action="store_true",
                        help="no progress bars (default: bars on stderr)")
    return parser


def _main(argv: list[str] | None, prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result = run(args.model, args.output_dir, attention=args.attention,
                 tasks=[t.strip() for t in args.tasks.split(",") if t.strip()],
                 max_train_sentences=args.max_train_sentences,
                 max_test_sentences=args.max_test_sentences,
                 max_seq_length=args.max_seq_length, batch_size=args.batch_size, l2=args.l2,
                 max_iter=args.max_iter, seed=args.seed, progress=not args.no_progress)
    out = sys.stdout
    for task, entry in result["tasks"].items():
        best = entry["best_layer"]
        out.write(f"{task:13s} best layer {best}: {entry['model'][best]:.3f} (random init "
                  f"{max(entry['random_init']):.3f} at best; selectivity "
                  f"{entry['selectivity'][best]:+.3f}), expected layer "
                  f"{_layer(entry['expected_layer'])}\n")
    out.write(result["ordering"]["sentence"] + "\n")
    out.write(f"written to {args.output_dir}: probe.json, probe.md, probe.png, "
              "attention_heads.png\n")
    return 0


def _layer(value: float | None) -> str:
    return "none (no gain over the embeddings)" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
