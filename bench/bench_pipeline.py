"""Pretraining input pipeline throughput: tfbert.pretraining_data.pretraining_dataset vs keras-hub's
preprocessing layers on the same records, and vs what a training step consumes.

Records come from the built-in Chinese corpus (a character vocab built from it), written by
`tfbert.pretraining_data.instance_files.create_pretraining_data` with jieba word starts. Reported in
examples/s:
- tfbert pretraining_dataset (token masking, and whole-word masking);
- keras-hub's WordPieceTokenizer + MultiSegmentPacker + MaskedLMMaskGenerator, batched in the
  same tf.data layout (read, shuffle, batch, map, prefetch);
- the training step of the default small model (bert-mini shape: 4 layers, hidden 256, seq 128,
  batch 32) that consumes the batches; the pipeline must be at least 10x faster.

    python -m bench.bench_pipeline [--quick]

`--per_core` measures instead what one CPU core sustains: `pretraining_stream` (the training
stream: positioned read, tokenize, pack, mask), in examples per second of the process's CPU
time over all its threads (so other load on the host does not change it), at BERT's two
lengths: seq 128 with 20 predictions and seq 512 with 76 (model size plays no part: the
pipeline sees only text and token ids).

    nice -n 10 python -m bench.bench_pipeline --per_core [--quick]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

SEQ, PREDICTIONS, BATCH = 128, 20, 32


def build_char_vocab(documents: list[list[str]], path: str, size: int) -> str:
    """A character-level Chinese vocab (bert-base-chinese style) from the corpus itself."""
    counts = collections.Counter(ch for doc in documents for s in doc for ch in s
                                 if not ch.isspace())
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"[unused{i}]" for i in range(10)]
    tokens += [c for c, _ in counts.most_common(size - len(tokens))]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return path


def make_records(workdir: str, num_documents: int, seq: int = SEQ) -> tuple[str, str, int]:
    """(file pattern, vocab file, records) for a sample of the built-in corpus."""
    from tfbert.data import corpora
    from tfbert.pretraining_data import instances
    from tfbert.pretraining_data.instance_files import create_pretraining_data

    documents = corpora.chinese_documents()
    random.Random(0).shuffle(documents)
    documents = documents[:num_documents]
    vocab = build_char_vocab(documents, os.path.join(workdir, "vocab.txt"), 6000)
    text = os.path.join(workdir, "corpus.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(doc) for doc in documents) + "\n")
    out = os.path.join(workdir, "pretrain.tfrecord")
    stats, _ = create_pretraining_data(
        out, vocab, [text], instances.InstanceOptions(max_seq_length=seq, dupe_factor=1),
        seed=0, num_shards=4, whole_word_mask=True, progress=False)
    return f"{out}-*", vocab, stats.instances


def keras_hub_dataset(pattern: str, vocab_file: str):
    """The same job with keras-hub's layers (they lower-case with NFKC, unlike the reference)."""
    import keras_hub
    import tensorflow as tf

    from tfbert.pretraining_data import records

    with open(vocab_file, encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocab, lowercase=True)
    cls_id, sep_id, pad_id, mask_id = (vocab.index(t) for t in ("[CLS]", "[SEP]", "[PAD]",
                                                                  "[MASK]"))
    packer = keras_hub.layers.MultiSegmentPacker(sequence_length=SEQ, start_value=cls_id,
                                                 end_value=sep_id, pad_value=pad_id)
    masker = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=len(vocab), mask_selection_rate=0.15, mask_token_id=mask_id,
        mask_selection_length=PREDICTIONS, unselectable_token_ids=[cls_id, sep_id, pad_id])

    def make(serialized):
        f = records.parse_examples(serialized)
        ids, segments = packer((tokenizer(f["text_a"]), tokenizer(f["text_b"])))
        masked = masker(ids)
        return {"input_ids": masked["token_ids"], "segment_ids": segments,
                "input_mask": tf.cast(ids != pad_id, tf.int32),
                "masked_lm_positions": masked["mask_positions"],
                "masked_lm_ids": masked["mask_ids"], "masked_lm_weights": masked["mask_weights"],
                "next_sentence_labels": f["next_sentence_labels"]}

    files = records.expand_file_pattern(pattern)
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda p: tf.data.TFRecordDataset(p, compression_type=""), cycle_length=4,
        num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.shuffle(10_000, seed=0).repeat().batch(BATCH, drop_remainder=True)
    return ds.map(make, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def examples_per_s(ds, batches: int, reps: int) -> float:
    """Median examples/s over `reps` runs of `batches` batches, after a warm-up."""
    iterator = iter(ds)
    for _ in range(5):
        next(iterator)
    rates = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(batches):
            next(iterator)
        rates.append(batches * BATCH / (time.perf_counter() - start))
    return sorted(rates)[len(rates) // 2]


def train_examples_per_s(ds, vocab_size: int, steps: int) -> float:
    """Examples/s of BertPretrainer.train_on_batch (bert-mini shape) on pipeline batches."""
    import keras

    from tfbert import BertConfig, BertEncoder, BertPretrainer

    config = dataclasses.replace(BertConfig.from_preset("bert-mini"), vocab_size=vocab_size)
    model = BertPretrainer(BertEncoder(config))
    model.compile(optimizer=keras.optimizers.AdamW(1e-4))
    batches = iter(ds)
    batch = next(batches)
    for _ in range(2):
        model.train_on_batch(batch)
    times = []
    for _ in range(steps):
        batch = next(batches)
        start = time.perf_counter()
        model.train_on_batch(batch)
        times.append(time.perf_counter() - start)
    return BATCH / sorted(times)[len(times) // 2]


def run(quick: bool = False) -> dict:
    """Measures the pipelines and the training step; returns rows and ratios."""
    from tfbert.pretraining_data import pretraining_dataset

    batches, reps, steps = (30, 3, 3) if quick else (150, 5, 10)
    with tempfile.TemporaryDirectory() as workdir:
        pattern, vocab, num_records = make_records(workdir, 1500 if quick else 6000)
        rows = []
        for name, wwm in (("tfbert pretraining_dataset", False),
                          ("tfbert pretraining_dataset (whole-word)", True)):
            ds = pretraining_dataset(pattern, vocab, SEQ, PREDICTIONS, BATCH,
                                     whole_word_mask=wwm, seed=0)
            rows.append({"benchmark": "pipeline", "system": name,
                         "examples_per_s": examples_per_s(ds, batches, reps)})
        try:
            rate = examples_per_s(keras_hub_dataset(pattern, vocab), batches, reps)
            rows.append({"benchmark": "pipeline", "system": "keras-hub layers in tf.data",
                         "examples_per_s": rate})
        except ImportError as e:
            rows.append({"benchmark": "pipeline", "system": "keras-hub layers in tf.data",
                         "error": str(e)})
        ds = pretraining_dataset(pattern, vocab, SEQ, PREDICTIONS, BATCH, seed=0)
        with open(vocab, encoding="utf-8") as f:
            vocab_size = sum(1 for _ in f)
        try:
            rows.append({"benchmark": "pipeline", "system": "consumer: bert-mini train step",
                         "examples_per_s": train_examples_per_s(ds, vocab_size, steps)})
        except ImportError as e:
            rows.append({"benchmark": "pipeline", "system": "consumer: bert-mini train step",
                         "error": str(e)})
    by = {r["system"]: r["examples_per_s"] for r in rows if "examples_per_s" in r}
    ours = by["tfbert pretraining_dataset"]
    ratios = {}
    if "keras-hub layers in tf.data" in by:
        ratios["tfbert/keras-hub pipeline"] = ours / by["keras-hub layers in tf.data"]
    if "consumer: bert-mini train step" in by:
        consumer = by["consumer: bert-mini train step"]
        ratios["pipeline/train step"] = ours / consumer
        ratios["pipeline (whole-word)/train step"] = (
            by["tfbert pretraining_dataset (whole-word)"] / consumer)
    return {"config": {"seq": SEQ, "batch": BATCH, "predictions": PREDICTIONS,
                       "records": num_records, "cpus": os.cpu_count()},
            "rows": rows, "ratios": ratios}


def per_core(quick: bool = False) -> dict:
    """Examples per CPU-second of `pretraining_stream` on one tf.data thread, seq 128 and 512."""
    import platform

    from tfbert.pretraining_data import record_scan, records
    from tfbert.pretraining_data.pipeline import InputMeter, pretraining_stream

    rows = []
    for seq, predictions in ((128, 20), (512, 76)):
        with tempfile.TemporaryDirectory() as workdir:
            pattern, vocab, _ = make_records(workdir, 1000 if quick else 3000, seq)
            files = records.expand_file_pattern(pattern)
            counts = [r.records for r in record_scan.scan_records(files)]
            for wwm in (False, True):
                meter = InputMeter()  # examples made, prefetched ones included
                ds = pretraining_stream(files, counts, vocab, seq, predictions, 256, seed=0,
                                        whole_word_mask=wwm, meter=meter)
                iterator = iter(ds)
                for _ in range(2):  # warm-up: tracing, tables, the prefetch buffer filling
                    next(iterator)
                batches = 10 if quick else 20
                made, cpu, wall = meter.examples, time.process_time(), time.perf_counter()
                for _ in range(batches):
                    next(iterator)
                made = meter.examples - made
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                rows.append({"seq": seq, "predictions": predictions, "whole_word_mask": wwm,
                             "examples_per_cpu_second": made / cpu,
                             "examples_per_wall_second": made / wall,
                             "records": sum(counts)})
    from tfbert.export.target_cpu import host_cpu

    model = host_cpu().model_name or platform.processor()
    return {"cpu": model, "load_average": os.getloadavg(), "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--per_core", action="store_true",
                        help="examples per CPU-second of the training stream, seq 128 and 512")
    args = parser.parse_args()
    print(json.dumps(per_core(args.quick) if args.per_core else run(args.quick), indent=2))
