"""How much of a fine-tuning batch is padding, with and without length buckets, on the built-in
training data.

For each max_seq_length T the examples go through the fine-tuning pipelines' own packing:
sentiment reviews through `BertPreprocessor` (cut to T), People's Daily NER sentences through
`tfbert.data.ner.encode_examples` (long sentences as windows of T), and, at T >= 128, the
built-in QA set through `tfbert.data.squad.convert_examples` (max_query_length 64, doc_stride
128). The padding share is 1 - real tokens / batch positions, where an example takes T
positions without buckets, and its bucket's length with them (a batch holds one bucket).
Besides tfbert's `bucket_lengths`, two other rules of at most 8 lengths are measured: "sqrt2"
(T, then about T / sqrt(2)^i rounded up to a multiple of 16, at every T) and "equal8" (8 equal
steps rounded up to a multiple of 16).

    nice .venv/bin/python -m experiments.bucket_padding
    nice .venv/bin/python -m experiments.bucket_padding --max_seq_length=64,128,384

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np

DEFAULT_VOCAB = "output/pretrain_default/model/vocab.txt"  # run_pretraining.py's default run


def sqrt2_lengths(t: int, count: int = 8, step: int = 16) -> list[int]:
    lengths = {t}
    x = float(t)
    while len(lengths) < count and x > step:
        x /= math.sqrt(2.0)
        lengths.add(max(step, step * math.ceil(x / step)))
    return sorted(lengths)


def equal_lengths(t: int, count: int = 8, step: int = 16) -> list[int]:
    width = max(step, step * math.ceil(t / count / step))
    return [*range(width, t, width), t]


def share(lengths: np.ndarray, buckets: list[int]) -> float:
    table = np.asarray(buckets)
    padded = table[np.searchsorted(table, lengths, side="left")].sum()
    return 1.0 - float(lengths.sum()) / float(padded)


def example_lengths(vocab_file: str, t: int) -> dict[str, np.ndarray]:
    """name -> the packed lengths (input_mask sums) of the built-in training data at T."""
    import tensorflow as tf

    from tfbert.data import classification, ner, squad
    from tfbert.data.qa_builtin import builtin_qa_examples
    from tfbert.text.preprocessor import BertPreprocessor
    from tfbert.text.tokenizer import BertTokenizer

    out = {}
    reviews = classification.builtin_examples("sentiment", "train")
    packer = BertPreprocessor(vocab_file, t)
    out[f"sentiment reviews ({len(reviews):,})"] = np.concatenate([
        packer(tf.constant([e.text for e in reviews[i:i + 1024]]))["input_mask"].numpy().sum(1)
        for i in range(0, len(reviews), 1024)])
    tokenizer = BertTokenizer(vocab_file)
    sentences = ner.people_daily_ner("train")
    features = ner.encode_examples(sentences, tokenizer, t, list(ner.PEOPLE_DAILY_LABELS),
                                   long_input="windows")
    out[f"People's Daily NER windows ({len(features.input_ids):,})"] = \
        features.input_mask.sum(1)
    if t >= 128:
        qa, _ = squad.convert_examples(builtin_qa_examples("train"), tokenizer, t, 128, 64)
        out[f"built-in QA windows ({len(qa):,})"] = np.array([f.input_mask.sum() for f in qa])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab_file", default=DEFAULT_VOCAB)
    parser.add_argument("--max_seq_length", default="128,384",
                        help="comma-separated values of T")
    args = parser.parse_args()
    if not os.path.exists(args.vocab_file):
        raise SystemExit(f"{args.vocab_file} not found: run `make demo` (its pretraining run "
                         "writes it) or pass --vocab_file")
    from tfbert.data.length_buckets import bucket_lengths

    print("| T | data | median length | none | tfbert buckets | sqrt2 | equal8 |")
    print("|---|---|---|---|---|---|---|")
    for t in (int(x) for x in args.max_seq_length.split(",")):
        for name, lengths in example_lengths(args.vocab_file, t).items():
            lengths = lengths.astype(np.int64)
            cells = [share(lengths, rule(t)) for rule in (lambda t: [t], bucket_lengths,
                                                          sqrt2_lengths, equal_lengths)]
            print(f"| {t} | {name} | {int(np.median(lengths))} | "
                  + " | ".join(f"{c:.1%}" for c in cells) + " |")
        print(f"| {t} | bucket lengths | {bucket_lengths(t)} | | | {sqrt2_lengths(t)} | "
              f"{equal_lengths(t)} |")


if __name__ == "__main__":
    main()
