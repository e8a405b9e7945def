"""Builds a WordPiece vocab.txt from raw text (default: the built-in Chinese corpus).

A hashed slice of the lines is held out and the [UNK] rate of the new vocab on it is reported.
Text is UTF-8 (a BOM is fine) unless --input_encoding names another (gb18030 for GBK text); a
user error (missing file, text in another encoding, no text) is one line on stderr, exit code 2.
--vocab_file is never one of the input files; an existing one is replaced only if tfbert wrote
it (its record `.vocab.txt.tfbert.json` beside it, `tfbert.ownership`) or with --overwrite.

    tfbert-build-vocab --vocab_file=vocab.txt            # built-in corpus, 21128 tokens
    tfbert-build-vocab --input_file=corpus/*.txt,more/*.txt --vocab_file=vocab.txt \\
        --vocab_size=30522 --lower_case=true

In a checkout, `python data_tools/build_vocab.py` is the same command.
"""

from __future__ import annotations

import argparse
import json
import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tfbert import textfiles  # noqa: E402
from tfbert.errors import run_cli  # noqa: E402
from tfbert.pretraining_data.vocab_corpus import build_vocab_file  # noqa: E402
from tfbert.text import vocab_builder  # noqa: E402


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    """The command's flags; every --help line states its default."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input_file", default="",
                   help="comma-separated globs of text files, one sentence per line (default: "
                        "empty, the built-in Chinese corpus)")
    p.add_argument("--vocab_file", required=True, help="output vocab.txt (required)")
    p.add_argument("--input_encoding", default=textfiles.DEFAULT_ENCODING,
                   help="text encoding of the input files, e.g. gb18030 (default: %(default)s)")
    p.add_argument("--vocab_size", type=int, default=vocab_builder.DEFAULT_VOCAB_SIZE,
                   help="tokens in the vocab, special ones included (default: %(default)s)")
    p.add_argument("--lower_case", "--do_lower_case", dest="lower_case", type=_bool,
                   default=True, help="true: uncased vocab; false: cased (default: true)")
    p.add_argument("--min_frequency", type=int, default=2,
                   help="least count of a merged pair (default: %(default)s)")
    p.add_argument("--num_unused", type=int, default=vocab_builder.NUM_UNUSED,
                   help="[unusedN] slots before [UNK] (default: %(default)s)")
    p.add_argument("--holdout_fraction", type=float, default=0.1,
                   help="share of lines held out to measure the [UNK] rate (default: "
                        "%(default)s)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --vocab_file that tfbert did not write (default: "
                        "refuse; one tfbert wrote is replaced)")
    p.add_argument("--no_progress", action="store_true",
                   help="no progress bar (default: a progress bar)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed flags (argv None: sys.argv[1:]); a bad flag exits with argparse's usage
    error."""
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Builds the vocab file and prints its summary.

    Args:
        argv: list of str or None. The flags (None: sys.argv[1:]).

    Returns:
        The summary dict of `tfbert.pretraining_data.vocab_corpus.build_vocab_file`
        (vocab_size, lines_train, lines_heldout, heldout_unk_rate, ...).
    """
    args = parse_args(argv)
    textfiles.check_encoding(args.input_encoding)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = build_vocab_file(
        args.vocab_file, input_file=args.input_file or None, vocab_size=args.vocab_size,
        lower_case=args.lower_case, holdout_fraction=args.holdout_fraction,
        show_progress=not args.no_progress, min_frequency=args.min_frequency,
        num_unused=args.num_unused, encoding=args.input_encoding, overwrite=args.overwrite)
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    return summary


def entry() -> None:
    """The console command (pyproject.toml's [project.scripts]): a user error is one line on
    stderr and exit code 2."""
    run_cli(main)


if __name__ == "__main__":
    entry()
