"""Writes BERT pretraining TFRecords (sentence pairs as text + NSP label) from raw text.

Input is the original BERT format: plain text, one sentence per line, a blank line between
documents. Without --input_file the built-in Chinese corpus (tfbert.data.corpora) is used.
Masks are not stored: tfbert.pretraining_data.pretraining_dataset draws fresh ones every epoch.

--output_format=google writes google-research/bert's records instead (int64 input_ids,
input_mask, segment_ids [max_seq_length], masked_lm_positions, masked_lm_ids and float
masked_lm_weights [max_predictions_per_seq], next_sentence_labels [1]) with static masks drawn
here (--max_predictions_per_seq, --masked_lm_prob, --do_whole_word_mask as in google's script),
for google-research/bert's, NVIDIA's and Model Garden's trainers; tfbert reads them too. The
sentence pairs are the same as tfbert's format holds for the same input and --random_seed.
--dupe_factor keeps its default of 10 (google's too) in both formats: with static masks each
pass is also the only source of different masks, as in google's script.
Text is UTF-8 (a BOM is fine) unless --input_encoding names another (gb18030 for GBK text).

An input that cannot make pretraining data (no documents, one document, a file in another
encoding than the one given, a missing file) is one line on stderr and exit code 2, and nothing
is written. So is an --output_file that is one of the inputs (a text file, the vocab), or an
existing file tfbert did not write: each file it writes gets a record `.NAME.tfbert.json` beside
it (`tfbert.ownership`), and only such a file is replaced, or any with --overwrite. Shards
appear under their final names only when complete. The last line printed is the summary:
documents, sentences, instances, NotNext share, and what was cut or skipped.

    tfbert-create-pretraining-data --input_file=corpus/*.txt \\
        --output_file=data/pretrain.tfrecord --vocab_file=vocab.txt --max_seq_length=128 \\
        --short_seq_prob=0.1 --dupe_factor=5 --random_seed=12345 --num_shards=8 \\
        --whole_word_mask --gzip

In a checkout, `python data_tools/create_pretraining_data.py` is the same command.
"""

from __future__ import annotations

import argparse
import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tfbert import textfiles  # noqa: E402
from tfbert.devices import list_devices  # noqa: E402
from tfbert.errors import run_cli  # noqa: E402
from tfbert.pretraining_data import instance_files, instances  # noqa: E402
from tfbert.pretraining_data.records import expand_file_pattern  # noqa: E402

DEFAULTS = instances.InstanceOptions()


def _bool(value: str) -> bool:
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _flag(p: argparse.ArgumentParser, name: str, default: bool, help: str) -> None:
    """A boolean flag as the reference's absl flags take it: --name, --name=false, --noname."""
    p.add_argument(f"--{name}", type=_bool, nargs="?", const=True, default=default,
                   help=f"{help} (default: {str(default).lower()})")
    p.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    """The command's flags (google-research/bert's names); every --help line states its
    default."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--input_file", default="",
                   help="comma-separated globs of text files (default: empty, the built-in "
                        "corpus)")
    p.add_argument("--output_file", required=True,
                   help="output path (shards: PATH-0000i-of-K) (required)")
    p.add_argument("--vocab_file", required=True, help="WordPiece vocab.txt (required)")
    p.add_argument("--input_encoding", default=textfiles.DEFAULT_ENCODING,
                   help="text encoding of the input files, e.g. gb18030 (default: %(default)s)")
    _flag(p, "do_lower_case", True, "lower-case as the training tokenizer does")
    p.add_argument("--max_seq_length", type=int, default=DEFAULTS.max_seq_length,
                   help="tokens per instance, [CLS] and [SEP]s included (default: %(default)s)")
    p.add_argument("--short_seq_prob", type=float, default=DEFAULTS.short_seq_prob,
                   help="probability of a shorter random target length (default: "
                        "%(default)s)")
    p.add_argument("--dupe_factor", type=int, default=DEFAULTS.dupe_factor,
                   help="passes over the input, each with different pairs (default: "
                        "%(default)s)")
    p.add_argument("--random_seed", type=int, default=12345,
                   help="seed of the pairs, cuts, shuffles and masks (default: %(default)s)")
    p.add_argument("--num_shards", type=int, default=1,
                   help="output files (default: %(default)s)")
    _flag(p, "whole_word_mask", False,
          "store jieba word boundaries for (Chinese) whole-word masking")
    _flag(p, "gzip", False, "GZIP-compress the records")
    _flag(p, "balance_next_sentence", True,
          "keep NotNext at 50%% despite one-sentence chunks (false: the reference's rule)")
    p.add_argument("--shuffle_buffer_documents", type=int,
                   default=DEFAULTS.shuffle_buffer_documents,
                   help="documents shuffled together (default: %(default)s)")
    p.add_argument("--random_pool_documents", type=int, default=DEFAULTS.random_pool_documents,
                   help="documents the NotNext segments are drawn from (default: %(default)s)")
    p.add_argument("--shuffle_buffer_instances", type=int,
                   default=DEFAULTS.shuffle_buffer_instances,
                   help="instances shuffled together before writing (default: %(default)s)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace existing output files that tfbert did not write (default: "
                        "refuse; ones tfbert wrote are replaced)")
    p.add_argument("--no_progress", action="store_true",
                   help="no progress bar (default: a progress bar)")
    p.add_argument("--output_format", choices=("tfbert", "google"), default="tfbert",
                   help="tfbert: text pairs, masked afresh when read; google: "
                   "google-research/bert's token ids with static masks (default: %(default)s)")
    p.add_argument("--max_predictions_per_seq", type=int, default=None,
                   help="google format: masked positions per record (default 20); tfbert "
                   "format: ignored, masking happens in the input pipeline")
    p.add_argument("--masked_lm_prob", type=float, default=None,
                   help="google format: share of tokens masked (default 0.15); tfbert format: "
                   "ignored")
    _flag(p, "do_whole_word_mask", False,
          "google format: mask a token with its ## pieces (with --whole_word_mask: whole jieba "
          "words); tfbert format: ignored, pass --whole_word_mask to tfbert-pretrain")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed flags (argv None: sys.argv[1:]); a bad flag exits with argparse's usage
    error."""
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> instances.Stats:
    args = parse_args(argv)
    list_devices()  # once, before any work (tfbert/devices.py: why)
    textfiles.check_encoding(args.input_encoding)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    google = args.output_format == "google"
    if not google and (args.max_predictions_per_seq is not None
                       or args.masked_lm_prob is not None or args.do_whole_word_mask):
        logging.warning("--max_predictions_per_seq/--masked_lm_prob/--do_whole_word_mask are "
                        "ignored for --output_format=tfbert: pass them to run_pretraining.py "
                        "(masks are drawn per epoch)")
    options = instances.InstanceOptions(
        max_seq_length=args.max_seq_length, short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor, balance_next_sentence=args.balance_next_sentence,
        shuffle_buffer_documents=args.shuffle_buffer_documents,
        random_pool_documents=args.random_pool_documents,
        shuffle_buffer_instances=args.shuffle_buffer_instances)
    input_files = None
    if args.input_file:
        input_files = expand_file_pattern(args.input_file)
    stats, paths = instance_files.create_pretraining_data(
        args.output_file, args.vocab_file, input_files, options, seed=args.random_seed,
        num_shards=args.num_shards, whole_word_mask=args.whole_word_mask, gzip=args.gzip,
        lower_case=args.do_lower_case, progress=not args.no_progress,
        encoding=args.input_encoding, output_format=args.output_format,
        max_predictions_per_seq=20 if args.max_predictions_per_seq is None
        else args.max_predictions_per_seq,
        masked_lm_prob=0.15 if args.masked_lm_prob is None else args.masked_lm_prob,
        do_whole_word_mask=args.do_whole_word_mask, overwrite=args.overwrite)
    print(f"wrote {len(paths)} file(s): {paths[0]}{' ...' if len(paths) > 1 else ''}")
    print(stats.summary())
    return stats


def entry() -> None:
    """The console command (pyproject.toml's [project.scripts]): a user error is one line on
    stderr and exit code 2."""
    run_cli(main)


if __name__ == "__main__":
    entry()
