"""A vocab file from text files or the built-in Chinese corpus, with its held-out [UNK] rate.

The learning itself is `tfbert.text.vocab_builder.build_vocab`; this module picks the text
(`input_file` globs, or `tfbert.data.corpora` when none is given), holds out a slice of it,
writes the vocab under tfbert's file ownership, and says what it made.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tfbert import ownership, textfiles
from tfbert.data import corpora, splits
from tfbert.errors import UserError
from tfbert.text import vocab_builder

logger = logging.getLogger(__name__)


def build_vocab_file(vocab_file: str, input_file: str | Sequence[str] | None = None,
                     vocab_size: int = vocab_builder.DEFAULT_VOCAB_SIZE, lower_case: bool = True,
                     holdout_fraction: float = 0.1, show_progress: bool = True,
                     encoding: str = textfiles.DEFAULT_ENCODING, overwrite: bool = False,
                     **kwargs: Any) -> dict[str, Any]:
    """Builds and writes a vocab from text files (or the built-in Chinese corpus), holding out
    a slice of the lines to measure the [UNK] rate.

    Args:
        vocab_file: str. Output path.
        input_file: str, list of str or None. Comma-separated glob patterns of text files (one
            sentence per line); None: the built-in Chinese corpus (tfbert.data.corpora).
        vocab_size: int. Tokens in the vocab.
        lower_case: bool. Uncased vocab.
        holdout_fraction: float. Share of lines (chosen by a hash of the line, as
            `corpora.stable_split` does for "test") kept out of training and used to measure
            the [UNK] rate.
        show_progress: bool. Progress bar.
        encoding: str. Text encoding of the input files (`--input_encoding`).
        overwrite: bool. Replace an existing vocab_file that tfbert did not write (one it
            wrote, unchanged since, is replaced anyway: `tfbert.ownership`).
        **kwargs: more `build_vocab` arguments (min_frequency, num_unused, cjk_fill).

    Returns:
        A summary dict: vocab_file, vocab_size, lines_train, lines_heldout, lines_skipped
        (dropped for undecodable bytes), heldout_unk_rate, heldout_tokens, cjk_chars, pieces
        (tokens of 2+ characters), unused_slots.

    Raises:
        UserError: no text, an unknown encoding, undecodable bytes beyond one line in 10,000;
            a vocab_file that is an input, or exists and tfbert did not write it (without
            overwrite), refused before anything is read.
        FileNotFoundError: a pattern that matches no file.
    """
    ownership.claim_files([vocab_file], {"input_file": input_file}, overwrite, "vocab_file")

    skipped: list[tuple[str, int, str]] = []
    if input_file is None:
        lines = [s for doc in splits.pretraining_documents() for s in doc]
        source = "the built-in Chinese corpus"
    else:
        source = input_file if isinstance(input_file, str) else ",".join(input_file)
        lines = list(vocab_builder.read_text_files(input_file, encoding,
                                     on_skip=lambda *where: skipped.append(where)))
    if skipped:
        logger.warning("skipped %d line(s) with undecodable bytes (first: %s)", len(skipped),
                       skipped[0][2])
    if not lines:
        raise UserError(f"{source}: no text (every line is blank); expected one sentence per "
                        "line")
    train, heldout = [], []
    for line in lines:
        split = corpora.stable_split(line, dev_fraction=0.0, test_fraction=holdout_fraction)
        (heldout if split == "test" else train).append(line)
    logger.info("building a %d-token vocab from %d lines of %s (%d held out)", vocab_size,
                len(train), source, len(heldout))
    tokens = vocab_builder.build_vocab(train, vocab_size=vocab_size, lower_case=lower_case,
                         show_progress=show_progress, **kwargs)
    vocab_builder.write_vocab(tokens, vocab_file)
    ownership.record_file(vocab_file)  # .vocab.txt.tfbert.json: a rerun may replace it
    stats = vocab_builder.unk_rate(vocab_file, heldout, lower_case=lower_case) if heldout else {}
    summary = {
        "vocab_file": vocab_file,
        "vocab_size": len(tokens),
        "lines_train": len(train),
        "lines_heldout": len(heldout),
        "lines_skipped": len(skipped),
        "heldout_unk_rate": stats.get("unk_rate"),
        "heldout_tokens": stats.get("tokens"),
        "cjk_chars": sum(1 for t in tokens if len(t) == 1 and vocab_builder.is_cjk(t)),
        "pieces": sum(1 for t in tokens if len(t.removeprefix("##")) > 1
                      and not t.startswith("[")),
        "unused_slots": sum(1 for t in tokens if t.startswith("[unused")),
    }
    logger.info("vocab summary: %s", summary)
    return summary
