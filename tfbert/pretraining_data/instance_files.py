"""Pretraining records from text files: documents read, instances made, shards written.

This is the library behind `data_tools/create_pretraining_data.py`: text files (one sentence a line,
a blank line between documents) or the built-in corpus -> `tfbert.pretraining_data.documents` ->
`tfbert.pretraining_data.instances` -> TFRecord shards in tfbert's format
(`tfbert.pretraining_data.records`) or google-research/bert's
(`tfbert.pretraining_data.google_records`).

Nothing lost, nothing silent (`create_pretraining_data`):
- Text files are read through `tfbert.textfiles` (a UTF-8 BOM is dropped, `encoding` such as
  gb18030 decodes strictly). A line with undecodable bytes is dropped and counted while such
  lines stay within one in 10,000 of a file's lines; beyond that (a file in another encoding)
  it is an error naming the file, the first bad line, its byte offset and the flag to pass.
- An input with no document, or only one (NSP draws NotNext segments from another document),
  is an error before anything is written. Shards are written under temporary names and
  renamed when complete: no empty or partial shard is ever left under the final name.
- An output path is never an input (a text file, the vocab), and an existing file is replaced
  only if tfbert wrote it (`.NAME.tfbert.json` beside it says so) or with `overwrite`
  (`tfbert.ownership`).
- A sentence longer than a pair holds (`max_seq_length - 3` tokens) is not split: it is cut
  to fit like any long segment and the rest of it is lost; such sentences are counted.
- `Stats.summary()` states documents, sentences, instances and the NotNext share, with the
  long sentences, the chunks that found no pair and the lines dropped for bad bytes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence

import tensorflow as tf
import tqdm

from tfbert import ownership, textfiles
from tfbert.data import splits
from tfbert.errors import UserError
from tfbert.pretraining_data import record_formats, records
from tfbert.pretraining_data.documents import bert_word_spans, tokenize_documents
from tfbert.pretraining_data.google_records import GoogleRecordEncoder
from tfbert.pretraining_data.instances import InstanceOptions, Stats, create_instances_multi_pass

logger = logging.getLogger(__name__)


def read_text_documents(files: Sequence[str], on_bytes: Callable[[int], None] | None = None,
                        encoding: str = textfiles.DEFAULT_ENCODING,
                        max_bad_fraction: float = textfiles.CORPUS_MAX_BAD_FRACTION,
                        on_skip: Callable[[str, int, str], None] | None = None
                        ) -> Iterator[list[str]]:
    """Documents in the reference's input format: one sentence per line, a blank line between
    documents (a new file also starts a new document). Reads one line at a time.

    Bytes are read through `tfbert.textfiles`: a UTF-8 byte-order mark is dropped, `encoding`
    decodes strictly, and a line whose bytes do not decode is dropped and counted as long as
    such lines stay within `max_bad_fraction` of the file's lines (by default one in 10,000,
    checked from 10,000 lines on); beyond that it is a `TextDecodeError` naming the file, the
    first bad line, its byte offset and the `--input_encoding` to pass.

    Args:
        files: sequence of str. Text files (local or any `tf.io.gfile` path).
        on_bytes: optional callback with the bytes read for each document (progress bars).
        encoding: str. The files' text encoding (`--input_encoding`).
        max_bad_fraction: float. Share of lines that may be dropped for undecodable bytes.
        on_skip: optional callback (path, line number, message) for each dropped line; without
            it each file with dropped lines logs one warning.
    """
    for path in files:
        document: list[str] = []
        read = 0
        skip = None if on_skip is None else functools.partial(on_skip, path)
        for text in textfiles.read_lines(path, encoding, max_bad_fraction, skip):
            if on_bytes is not None:
                read += len(text.encode(encoding, errors="replace"))
            line = text.strip()
            if line:
                document.append(line)
                continue
            if document:
                yield document
                document = []
            if on_bytes is not None:
                on_bytes(read)
                read = 0
        if document:
            yield document
        if on_bytes is not None and read:
            on_bytes(read)


def _describe_files(files: Sequence[str]) -> str:
    shown = ", ".join(files[:3])
    return shown + (f" (and {len(files) - 3} more files)" if len(files) > 3 else "")


def check_documents(documents: Iterable[list[str]], source: str) -> None:
    """A UserError unless `documents` holds two documents with text (next-sentence prediction
    draws the NotNext segment B from another document). Reads only as far as it needs to.

    Args:
        documents: iterable of list[str]. E.g. `read_text_documents(files)`.
        source: str. What the documents are, for the message (file names).
    """
    found: list[list[str]] = []
    try:
        for doc in documents:
            if any(s.strip() for s in doc):
                found.append(doc)
            if len(found) == 2:
                return
    finally:
        close = getattr(documents, "close", None)
        if close is not None:
            close()
    if not found:
        raise UserError(f"{source}: no documents (no line holds text; expected one sentence per "
                        "line and a blank line between documents)")
    sentences = sum(1 for s in found[0] if s.strip())
    raise UserError(f"{source}: only one document ({sentences} sentence(s)); next-sentence "
                    "prediction needs at least two, to draw NotNext segments from another "
                    "document: put a blank line between documents (a new input file also "
                    "starts one)")


def create_pretraining_data(output_file: str, vocab_file: str,
                            input_files: Sequence[str] | None = None,
                            options: InstanceOptions | None = None, seed: int = 12345,
                            num_shards: int = 1, whole_word_mask: bool = False,
                            gzip: bool = False, lower_case: bool = True,
                            progress: bool = True,
                            documents: Sequence[list[str]] | None = None,
                            encoding: str = textfiles.DEFAULT_ENCODING,
                            max_bad_fraction: float = textfiles.CORPUS_MAX_BAD_FRACTION,
                            output_format: str = "tfbert", max_predictions_per_seq: int = 20,
                            masked_lm_prob: float = 0.15, do_whole_word_mask: bool = False,
                            overwrite: bool = False) -> tuple[Stats, list[str]]:
    """Writes pretraining TFRecords (see `tfbert.pretraining_data.records`) from text files, from
    in-memory `documents`, or (neither given) from the built-in Chinese corpus.

    In-memory documents (and the built-in corpus) are shuffled whole with `seed` first, as the
    reference does: a corpus in source order (the built-in one has People's Daily articles
    first, one-sentence reviews after) would otherwise drift from 50% NotNext (about 60%).

    Nothing is written for an input that cannot make pretraining data: no documents, or only
    one (a `UserError` before the tokenizer is even built). Shards are written under temporary
    names beside `output_file` and renamed only when all are complete, so an error or a kill
    never leaves a partial shard under the final name. Lines dropped for undecodable bytes and
    sentences longer than a pair holds (`max_seq_length - 3` tokens: cut to fit, the rest is
    lost) are counted in the returned `Stats` and reported in a warning.

    Args:
        output_file: str. Output path; with `num_shards` K > 1 the shards are
            `output_file-0000i-of-0000K`.
        vocab_file: str. WordPiece vocab (token counts must match the training tokenizer).
        input_files: sequence of str | None. Text files (one sentence per line, blank line
            between documents); None for the built-in corpus.
        options: InstanceOptions | None. Lengths, dupe factor, buffer sizes.
        seed: int. Random seed: the same input and seed give the same files.
        num_shards: int. Output shards (instances are dealt round-robin).
        whole_word_mask: bool. Store jieba word starts for whole-word masking.
        gzip: bool. GZIP-compressed records.
        lower_case: bool. As for `BertTokenizer` (use the training setting).
        progress: bool. Show a progress bar.
        documents: sequence of list[str] | None. Documents of sentences (instead of files).
        encoding: str. Text encoding of `input_files` (`--input_encoding`; the vocab is
            UTF-8, as tfbert writes it).
        max_bad_fraction: float. Share of a file's lines that may be dropped for undecodable
            bytes (see `read_text_documents`).
        output_format: str. "tfbert": text pairs, masked when read
            (`tfbert.pretraining_data.records`). "google": google-research/bert's token ids with
            static masks, drawn here (`tfbert.pretraining_data.google_records`); the instances
            are the same for the same input, options and seed.
        max_predictions_per_seq: int. google format: masked positions per record (P).
        masked_lm_prob: float. google format: share of non-special tokens masked.
        do_whole_word_mask: bool. google format: mask a token with its `##` pieces (and,
            with `whole_word_mask`, whole jieba words).
        overwrite: bool. Replace existing output files that tfbert did not write (ones it
            wrote, unchanged since, are replaced anyway: each gets a record
            `.NAME.tfbert.json` beside it, `tfbert.ownership`).

    Returns:
        (Stats, the shard paths written).

    Raises:
        UserError: no or one document, no instances, an unknown encoding, undecodable bytes
            beyond `max_bad_fraction`, bad options; an output path that is an input (a text
            file, the vocab) or an existing file tfbert did not write (without overwrite),
            refused before anything is read.
        FileNotFoundError: an input file does not exist.
    """
    options = options or InstanceOptions()
    encoding = textfiles.check_encoding(encoding)
    if output_format not in record_formats.RECORD_FORMATS:
        raise UserError(f"output_format {output_format!r} is not one of "
                        f"{sorted(record_formats.RECORD_FORMATS)}")
    if output_format == record_formats.GOOGLE and not (
            1 <= max_predictions_per_seq <= options.max_seq_length):
        raise UserError(f"max_predictions_per_seq {max_predictions_per_seq} must be in "
                        f"[1, max_seq_length={options.max_seq_length}]")
    if output_format == record_formats.GOOGLE and not 0 < masked_lm_prob <= 1:
        raise UserError(f"masked_lm_prob {masked_lm_prob} is not in (0, 1]")
    if input_files and documents is not None:
        raise ValueError("pass input_files or documents, not both")
    final_paths = records.shard_paths(output_file, num_shards)
    ownership.claim_files(final_paths, {"input_file": input_files, "vocab_file": vocab_file},
                          overwrite, "output_file")
    skipped: list[tuple[str, int, str]] = []
    reads = 0
    if input_files:
        source = _describe_files(input_files)
        check_documents(read_text_documents(input_files, encoding=encoding,
                                            max_bad_fraction=max_bad_fraction,
                                            on_skip=lambda *_: None), source)
        total = sum(tf.io.gfile.stat(f).length for f in input_files) * options.dupe_factor
        bar = tqdm.tqdm(total=total, unit="B", unit_scale=True, disable=not progress,
                        desc="pretraining data")

        def on_skip(path: str, line: int, message: str) -> None:
            if reads == 1:  # count the first pass only
                skipped.append((path, line, message))

        def read_texts() -> Iterator[list[str]]:
            nonlocal reads
            reads += 1
            return read_text_documents(input_files, on_bytes=bar.update, encoding=encoding,
                                       max_bad_fraction=max_bad_fraction, on_skip=on_skip)
    else:
        in_memory = list(splits.pretraining_documents() if documents is None else documents)
        source = "the built-in corpus" if documents is None else "documents"
        check_documents(in_memory, source)
        random.Random(seed).shuffle(in_memory)  # in memory anyway: shuffle whole
        bar = tqdm.tqdm(total=len(in_memory) * options.dupe_factor, unit="doc",
                        disable=not progress, desc=f"pretraining data ({source})")

        def read_texts() -> Iterator[list[str]]:
            for doc in in_memory:
                yield doc
                bar.update(1)

    spans = bert_word_spans(vocab_file, lower_case=lower_case)
    encoder = None
    if output_format == record_formats.GOOGLE:
        encoder = GoogleRecordEncoder(vocab_file, options.max_seq_length,
                                      max_predictions_per_seq, masked_lm_prob,
                                      do_whole_word_mask, lower_case, seed=seed)
    stats = Stats()
    directory, name = os.path.split(output_file)
    writer = records.ShardedWriter(os.path.join(directory, f".{name}.tmp-{os.getpid()}"),
                                   num_shards, gzip=gzip)
    try:
        with writer:
            for inst in create_instances_multi_pass(
                    lambda: tokenize_documents(read_texts(), spans, whole_word_mask), options,
                    seed, stats=stats):
                if encoder is None:
                    writer.write(records.make_example(inst.text_a, inst.text_b,
                                                      inst.next_sentence_label,
                                                      inst.word_starts_a, inst.word_starts_b))
                else:
                    for record in encoder.add(inst):
                        writer.write(record)
                bar.set_postfix(instances=f"{stats.instances:,}", refresh=False)
            for record in encoder.flush() if encoder is not None else ():
                writer.write(record)
        stats.bad_lines = len(skipped)
        if stats.documents < 2 or stats.instances == 0:
            raise UserError(f"{source}: {stats.documents} document(s) with tokens made "
                            f"{stats.instances} instances; pretraining data needs at least two "
                            f"documents and one instance ({stats.summary()})")
        for temp, path in zip(writer.paths, final_paths, strict=True):
            tf.io.gfile.rename(temp, path, overwrite=True)
            ownership.record_file(path)  # .NAME.tfbert.json: a rerun may replace it
    except BaseException:
        for temp in writer.paths:
            with contextlib.suppress(Exception):
                tf.io.gfile.remove(temp)
        raise
    finally:
        bar.close()
    _warn(stats, options, skipped)
    return stats, final_paths


def _warn(stats: Stats, options: InstanceOptions, skipped: list[tuple[str, int, str]]) -> None:
    """One warning for each thing that was lost or went off balance."""
    if skipped:
        logger.warning("skipped %d line(s) with undecodable bytes (first: %s)", len(skipped),
                       skipped[0][2])
    if stats.long_sentences:
        logger.warning("%d of %d sentences are longer than the %d tokens a pair holds "
                       "(max_seq_length - 3): each is cut to fit and the rest of it is lost; "
                       "put one sentence per line", stats.long_sentences, stats.sentences,
                       stats.pair_tokens)
    share = stats.not_next_share
    noise = 3 * 0.5 / max(1, stats.instances) ** 0.5  # 3 binomial standard deviations
    if not options.balance_next_sentence or abs(share - 0.5) <= max(0.03, noise):
        return
    forced = stats.forced_not_next / max(1, stats.chunks)
    if forced > 0.5:
        reason = (f"{forced:.0%} of the chunks are one sentence long and so always NotNext: "
                  "the input is mostly one-sentence documents")
    elif stats.dropped > 0.05 * max(1, stats.chunks):
        reason = (f"{stats.dropped:,} of {stats.chunks:,} chunks found no pair (too few "
                  "documents, or words longer than the room)")
    else:
        reason = (f"the input has runs of one-sentence documents the document shuffle buffer "
                  f"({options.shuffle_buffer_documents}) cannot mix; a larger "
                  "shuffle_buffer_documents or interleaved input files help")
    logger.warning("NotNext share is %.1f%% (not 50%%): %s", 100 * share, reason)
