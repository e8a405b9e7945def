"""Tokenizer throughput on the built-in Chinese corpus: tfbert.BertTokenizer against the
`tokenizers` package (Rust, the reference), keras-hub's BertTokenizer and TF Text's
FastBertTokenizer, measured side by side in one run, with the share of lines each tokenizes to
exactly the reference's ids.

- tfbert, keras-hub, TF Text: in-graph, `tf.data` batches of 1,024 lines mapped through the
  tokenizer (`num_parallel_calls=AUTOTUNE`), tokens consumed as ragged tensors.
- tokenizers: `encode_batch` on the same 1,024-line batches, its default parallelism (Rayon
  threads over the cores, TOKENIZERS_PARALLELISM unset), and `encode` line by line (one thread).

The tf.data systems are timed on one repeating iterator, as an input pipeline runs; the set-up
of each (making the iterator: instantiating the map function, once per pass over a dataset) is
reported separately in milliseconds. Wall-clock lines/s and tokens/s are the median of timed
passes after a warm-up pass; CPU microseconds per line (all threads of the process, timed
passes only) are also reported: on a shared machine they are the steadier figure.

    python -m bench.bench_tokenizer [--quick] [--vocab_file=vocab.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from bench.common import timeit

BATCH = 1024


def _measure(fn, lines: int, tokens: int, reps: int, setup_s: float | None = None) -> dict:
    """Times fn (one pass over all lines) after a warm-up pass, by wall clock (median) and by
    process CPU time (mean over the timed passes)."""
    fn()
    cpu_start = time.process_time()
    timing = timeit(fn, warmup=0, reps=reps)
    cpu = (time.process_time() - cpu_start) / reps
    out = {"lines_per_s": lines / timing["median_s"], "tokens_per_s": tokens / timing["median_s"],
           "cpu_us_per_line": 1e6 * cpu / lines, "seconds": timing["median_s"]}
    if setup_s is not None:
        out["iterator_setup_s"] = setup_s
    return out


def _tf_pass(tokenize, texts: list[str]):
    """tf.data passes: batches of BATCH lines through `tokenize`, from one repeating iterator
    (as an input pipeline runs: making the iterator instantiates the map function, about 0.1 s
    for tfbert, once per pass over the data; that set-up is timed separately, not in the
    throughput). Returns (one pass as a callable, the dataset, the set-up seconds)."""
    import tensorflow as tf

    ds = (tf.data.Dataset.from_tensor_slices(texts).batch(BATCH)
          .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE))
    started = time.perf_counter()
    iterator = iter(ds.repeat().prefetch(2))
    next(iterator)
    setup_s = time.perf_counter() - started
    batches = -(-len(texts) // BATCH)

    def run() -> int:  # the ids come first when the tokenizer also returns offsets
        return sum(int(tf.size(tf.nest.flatten(next(iterator), expand_composites=True)[0]))
                   for _ in range(batches))

    return run, ds, setup_s


def _agreement(ds, expected: list[list[int]]) -> float:
    rows = [row for out in ds for row in (out[0] if isinstance(out, tuple) else out).to_list()]
    return sum(a == b for a, b in zip(rows, expected, strict=True)) / len(expected)


def run(quick: bool = False, vocab_file: str | None = None) -> dict:
    """Measures every tokenizer; returns {"rows": [...], "ratios": {...}, "lines": N}."""
    import tensorflow as tf
    import tokenizers

    from tfbert.data import corpora
    from tfbert.pretraining_data.vocab_corpus import build_vocab_file
    from tfbert.text.tokenizer import BertTokenizer

    texts = list(corpora.iter_chinese_text())
    if quick:
        texts = texts[:20000]
    reps = 2 if quick else 3
    with tempfile.TemporaryDirectory() as workdir:
        if vocab_file is None:  # the project's Chinese vocab, as data_tools/build_vocab.py makes it
            vocab_file = os.path.join(workdir, "vocab.txt")
            build_vocab_file(vocab_file, show_progress=False)
        # BertWordPieceTokenizer's pipeline, without matching "[CLS]"-like strings in text.
        ref = tokenizers.Tokenizer(tokenizers.models.WordPiece.from_file(
            vocab_file, unk_token="[UNK]", max_input_chars_per_word=100))
        ref.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
        ref.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
        expected = [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]
        num_tokens = sum(len(e) for e in expected)
        rows = []

        def add(system: str, figures: dict, agreement: float, note: str) -> None:
            rows.append({"benchmark": "tokenizer", "system": system, **figures,
                         "identical_to_reference": agreement, "note": note})

        batches = [texts[i:i + BATCH] for i in range(0, len(texts), BATCH)]
        add("tokenizers encode_batch", _measure(
            lambda: [ref.encode_batch(b, add_special_tokens=False) for b in batches],
            len(texts), num_tokens, reps), 1.0, "Rust; default Rayon threads over the cores")
        add("tokenizers encode (1 thread)", _measure(
            lambda: [ref.encode(t, add_special_tokens=False) for t in texts],
            len(texts), num_tokens, reps), 1.0, "Rust; one line per call")

        tfbert_tokenizer = BertTokenizer(vocab_file)
        fn, ds, setup = _tf_pass(tfbert_tokenizer.tokenize, texts)
        add("tfbert BertTokenizer", _measure(fn, len(texts), num_tokens, reps, setup),
            _agreement(ds, expected), "tf.data, batches of 1024")
        fn, ds, setup = _tf_pass(tfbert_tokenizer.tokenize_with_offsets, texts)
        add("tfbert (with offsets)", _measure(fn, len(texts), num_tokens, reps, setup),
            _agreement(ds, expected), "tf.data, batches of 1024")

        import tensorflow_text as tf_text

        vocab = tfbert_tokenizer.vocab
        fast_bert = tf_text.FastBertTokenizer(vocab, token_out_type=tf.int32,
                                              lower_case_nfd_strip_accents=True)
        fn, ds, setup = _tf_pass(fast_bert.tokenize, texts)
        add("TF Text FastBertTokenizer", _measure(fn, len(texts), num_tokens, reps, setup),
            _agreement(ds, expected), "lower_case_nfd_strip_accents (NFKC case folding)")
        try:
            import keras_hub

            hub = keras_hub.tokenizers.BertTokenizer(vocabulary=vocab, lowercase=True)
            fn, ds, setup = _tf_pass(hub.tokenize, texts)
            add("keras-hub BertTokenizer", _measure(fn, len(texts), num_tokens, reps, setup),
                _agreement(ds, expected), "tf.data, batches of 1024")
        except ImportError as e:
            rows.append({"benchmark": "tokenizer", "system": "keras-hub BertTokenizer",
                         "error": str(e)})

    by = {r["system"]: r for r in rows if "lines_per_s" in r}
    base = by["tokenizers encode_batch"]
    ratios = {f"tfbert vs {name} (wall)": by["tfbert BertTokenizer"]["lines_per_s"]
              / by[name]["lines_per_s"] for name in by if not name.startswith("tfbert")}
    ratios["tfbert vs tokenizers encode_batch (CPU time)"] = (
        base["cpu_us_per_line"] / by["tfbert BertTokenizer"]["cpu_us_per_line"])
    return {"rows": rows, "ratios": ratios, "lines": len(texts), "tokens": num_tokens,
            "vocab_size": len(vocab)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 lines, fewer passes")
    parser.add_argument("--vocab_file", default=None,
                        help="vocab to use (default: build the 21,128-token Chinese vocab)")
    args = parser.parse_args()
    result = run(args.quick, args.vocab_file)
    print(f"{'system':<32} {'lines/s':>10} {'tokens/s':>12} {'cpu us/line':>12} {'exact':>7} "
          f"{'setup ms':>9}")
    for row in result["rows"]:
        if "error" in row:
            print(f"{row['system']:<32} error: {row['error']}")
            continue
        print(f"{row['system']:<32} {row['lines_per_s']:>10.0f} {row['tokens_per_s']:>12.0f} "
              f"{row['cpu_us_per_line']:>12.1f} {row['identical_to_reference']:>7.1%} "
              f"{row.get('iterator_setup_s', 0) * 1e3:>9.0f}")
    for name, value in result["ratios"].items():
        print(f"{name:<52} {value:6.2f}x")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))


if __name__ == "__main__":
    main()
