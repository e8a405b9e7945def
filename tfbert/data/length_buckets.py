"""Length buckets: fine-tuning batches cut to one of a few lengths instead of max_seq_length.

Every fine-tuning pipeline packs its examples to max_seq_length (T). With length buckets an
example goes to the shortest of `bucket_lengths(T)` that holds it (its length: the 1s of its
input_mask; a document of windows [K, T]: its longest window; a text pair of the contrastive
trainer: its longest text), every batch holds examples of one bucket, and the batch's
per-token tensors are cut to that bucket's length L: `[B, T] -> [B, L]`. The cut drops padding
only (positions at or past an example's length, where input_mask is 0), so a model's outputs
at the real positions are those of the padded batch (tests/test_length_buckets.py).

    ds = batch_by_length(examples, batch_size=32, max_seq_length=128, shuffle=True, seed=1)
    finetune(model, ds, ...)          # ds.cardinality() is the exact number of batches
    logits = predict_in_order(model, batch_by_length(dev_examples, 64, 128))

Training (`shuffle=True`): the examples are shuffled (seeded, differently each epoch) and then
grouped (`tf.data.Dataset.group_by_window`, one window per bucket), so batches of different
buckets interleave; an epoch ends with each bucket's partial batch. An epoch has
`num_batches(lengths, T, batch_size)` = sum over buckets of ceil(n_b / batch_size) batches,
and the dataset states it (`assert_cardinality`), so `tfbert.training.finetune.finetune` reads
it as steps_per_epoch. Evaluation and prediction (`shuffle=False`): the examples in chunks of
SORT_CHUNK_BATCHES batches, each chunk sorted by length and cut into consecutive batches, each
batch cut to the bucket length of its longest example: ceil(N / batch_size) batches, as without
buckets (per-bucket groups would end in a partial batch per bucket, a per-batch cost that ate
most of the gain on a dev set of a few hundred examples). Each batch's input dict carries
`example_index` (int64 [B]): the position of each of its examples in the input;
`predict_in_order` runs a model over such batches and returns the outputs in input order,
per-token outputs ([B, L, C] NER logits, QA's start and end logits [B, L]) padded back to T, so
the decoders read them as before.

Under tf.distribute a global batch is one bucket and is split across replicas afterwards, so
every replica gets the same length at a step; gradient accumulation adds the gradients of
micro-batches of any lengths (each is [B, L] -> gradients of the same variables).

Shape legend: B = batch, T = max_seq_length, L = a bucket's length, K = windows, C = classes.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np
import tensorflow as tf

INDEX_KEY = "example_index"  # the input dict's key of an evaluation batch's example positions

# Bucket lengths are multiples of BUCKET_STEP (a multiple of 8, as tensor cores want), and at
# most MAX_BUCKETS of them: XLA compiles each length (and each partial batch) once.
BUCKET_STEP = 16
MAX_BUCKETS = 8


def bucket_lengths(max_seq_length: int) -> list[int]:
    """The lengths batches are cut to, ascending, the last max_seq_length (T).

    T <= 128: every multiple of 16 below T, then T (at most 8 lengths). T > 128: T and 7
    lengths below it, each about T / sqrt(2)^i rounded up to a multiple of 16 (finer where
    sentences are short, coarser beyond 128 where they are rare).

    The padding left (share of the batch positions that are padding) on the built-in training
    data, packed as the fine-tuning runs pack it, with run_pretraining.py's default vocab
    (`nice .venv/bin/python -m experiments.bucket_padding`):

        T    data                                     no buckets   buckets
        128  sentiment reviews (13,846)               53.0%         9.2%
        128  People's Daily NER windows (38,026)      68.1%        15.2%
        128  built-in QA windows (13,938)             23.9%         4.3%
        384  sentiment reviews                        81.3%        17.5%
        384  People's Daily NER windows (37,636)      89.4%        24.6%
        384  built-in QA windows (8,470)              62.1%        15.6%

    At T = 128 the sqrt(2) steps ([16, 32, 48, 64, 96, 128]) leave 11.5%, 18.1% and 7.1%; at
    T = 384 eight equal steps of 48 leave 23.9%, 37.3% and 13.8%.

    Args:
        max_seq_length: int. T (>= 1).

    Example:
    >>> bucket_lengths(128)
    [16, 32, 48, 64, 80, 96, 112, 128]
    >>> bucket_lengths(384)
    [32, 48, 80, 96, 144, 192, 272, 384]
    >>> bucket_lengths(40)
    [16, 32, 40]
    """
    t = int(max_seq_length)
    if t < 1:
        raise ValueError(f"max_seq_length must be >= 1, got {max_seq_length}")
    if t <= BUCKET_STEP * MAX_BUCKETS:
        return [*range(BUCKET_STEP, t, BUCKET_STEP), t]
    lengths = {t}
    x = float(t)
    while len(lengths) < MAX_BUCKETS and x > BUCKET_STEP:
        x /= math.sqrt(2.0)
        lengths.add(max(BUCKET_STEP, BUCKET_STEP * math.ceil(x / BUCKET_STEP)))
    return sorted(lengths)


def bucket_ids(lengths: Any, max_seq_length: int) -> np.ndarray:
    """int64 [N]: the bucket (index into `bucket_lengths(T)`) of each example length [N]."""
    lengths = np.asarray(lengths, np.int64)
    if lengths.size and (lengths.min() < 0 or lengths.max() > max_seq_length):
        raise ValueError(f"example lengths must lie in [0, {max_seq_length}], got "
                         f"{lengths.min()} .. {lengths.max()}")
    return np.searchsorted(np.asarray(bucket_lengths(max_seq_length)), lengths, side="left")


def num_batches(lengths: Any, max_seq_length: int, batch_size: int) -> int:
    """Batches in one pass of `batch_by_length`: sum over buckets of ceil(n_b / batch_size).

    Example:
    >>> num_batches([5, 9, 20, 30, 100], max_seq_length=128, batch_size=2)
    3
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    counts = np.bincount(bucket_ids(lengths, max_seq_length))
    return int(sum(math.ceil(n / batch_size) for n in counts))


def _inputs(element: Any) -> Any:
    """The input part of a dataset element: `inputs` or the first of `(inputs, *targets)`."""
    return element[0] if isinstance(element, tuple) else element


def _masks(inputs: Any) -> list[Any]:
    """Every `input_mask` in an input dict, or in a dict of input dicts (text pairs)."""
    if isinstance(inputs, dict):
        if "input_mask" in inputs:
            return [inputs["input_mask"]]
        return [m for value in inputs.values() for m in _masks(value)]
    return []


def example_length(element: Any) -> tf.Tensor:
    """int32 scalar: the length of one example (the longest input_mask row in its inputs)."""
    return _mask_lengths(_inputs(element), rank=0)


def _mask_lengths(inputs: Any, rank: int) -> tf.Tensor:
    """The longest input_mask row of each example in `inputs`: rank 0 for one example (masks
    [T] or [K, T]), rank 1 for a batch ([B, T] or [B, (K), T] masks: int32 [B])."""
    rows = []
    for mask in _masks(inputs):
        x = tf.reduce_sum(tf.cast(mask, tf.int32), axis=-1)
        while x.shape.rank > rank:
            x = tf.reduce_max(x, axis=-1)
        rows.append(x)
    if not rows:
        raise ValueError("length buckets need an input dict with input_mask in each example")
    return tf.reduce_max(tf.stack(rows), axis=0)


def example_lengths(examples: tf.data.Dataset) -> np.ndarray:
    """int64 [N]: `example_length` of every example of a dataset of single examples (one pass;
    a cached dataset is filled by it)."""
    lengths = examples.map(lambda *e: example_length(e if len(e) > 1 else e[0]),
                           num_parallel_calls=tf.data.AUTOTUNE).batch(8192)
    parts = [b.numpy() for b in lengths]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def packed_length(examples: tf.data.Dataset) -> int:
    """T: the last dimension of input_mask in a dataset of single examples (known statically)."""
    masks = _masks(_inputs(examples.element_spec))
    t = masks[0].shape[-1] if masks else None
    if t is None:
        raise ValueError("length buckets need input_mask with a known last dimension (T) in "
                         f"the examples' element_spec, got {examples.element_spec}")
    return int(t)


def batch_by_length(examples: tf.data.Dataset, batch_size: int, max_seq_length: int,
                    shuffle: bool = False, seed: int | None = None,
                    per_token_targets: bool = False, lengths: Any = None) -> tf.data.Dataset:
    """Batches cut to a bucket length: in training one bucket each, in evaluation sorted by
    length (module docstring).

    Args:
        examples: tf.data.Dataset of single examples: `inputs` or `(inputs, *targets)`;
            inputs is a dict of per-token tensors [T] or [K, T] holding input_mask
            (input_ids, input_mask, segment_ids), or a dict of such dicts (text pairs).
            Ragged documents [(K), T] batch to [B, K, L], padded with all-zero windows.
        batch_size: int. Examples per batch (a bucket's last batch may be smaller).
        max_seq_length: int. T, the length every example is packed to.
        shuffle: bool. Training: shuffle the examples (seeded, differently each epoch) before
            grouping. False: sorted by length in chunks, each input dict given
            `example_index` (the positions `predict_in_order` puts the outputs back in).
        seed: int, optional. Shuffle seed.
        per_token_targets: bool. The targets are per token ([T] labels and weights of NER) and
            are cut with the inputs; otherwise they are left as they are (class ids, label
            sets, scores, QA's start/end positions).
        lengths: int [N], optional. The examples' lengths (`example_lengths`, else one pass
            computes them).

    Returns:
        tf.data.Dataset whose cardinality is `num_batches(lengths, T, batch_size)` (training)
        or ceil(N / batch_size) (evaluation).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lengths = example_lengths(examples) if lengths is None else np.asarray(lengths, np.int64)
    table = tf.constant(bucket_lengths(max_seq_length), tf.int32)
    if shuffle:
        count = num_batches(lengths, max_seq_length, batch_size)  # checks lengths <= T
    else:
        bucket_ids(lengths, max_seq_length)  # checks lengths <= T
        count = math.ceil(len(lengths) / batch_size)
    # Documents of windows [K, T] (K differs between documents) batch as ragged [B, (K), T]
    # and come out dense, padded with all-zero windows.
    ragged = any(isinstance(s, tf.RaggedTensorSpec) for s in tf.nest.flatten(
        examples.element_spec))

    def cut(size: tf.Tensor, batch: dict[str, Any]) -> Any:
        def to_length(x: Any) -> Any:  # [B, T] -> [B, L], [B, K, T] -> [B, K, L]
            x = x[..., :size]
            return x.to_tensor() if isinstance(x, tf.RaggedTensor) else x

        element = batch["element"]
        if isinstance(element, tuple):
            rest = element[1:]
            element = (tf.nest.map_structure(to_length, element[0]),
                       *(tf.nest.map_structure(to_length, rest) if per_token_targets else rest))
        else:
            element = tf.nest.map_structure(to_length, element)
        if "index" in batch:
            inputs = dict(_inputs(element), **{INDEX_KEY: batch["index"]})
            element = (inputs, *element[1:]) if isinstance(element, tuple) else inputs
        return element

    if shuffle:
        ds = examples.shuffle(max(1, len(lengths)), seed=seed, reshuffle_each_iteration=True)
        ds = ds.map(lambda *e: {"element": e if len(e) > 1 else e[0]})

        def key(item: dict[str, Any]) -> tf.Tensor:
            length = example_length(item["element"])
            return tf.cast(tf.searchsorted(table, length[None], side="left")[0], tf.int64)

        ds = ds.group_by_window(
            key_func=key,
            reduce_func=lambda bucket, window: (
                window.ragged_batch(batch_size) if ragged else window.batch(batch_size)).map(
                lambda batch: cut(table[bucket], batch)),
            window_size=batch_size)
    else:
        ds = _sorted_batches(examples, batch_size, ragged).map(
            lambda batch: cut(_bucket_length(table, batch), batch))
    return ds.apply(tf.data.experimental.assert_cardinality(count)).prefetch(tf.data.AUTOTUNE)


# Evaluation sorts the examples by length in chunks of this many batches (module docstring).
SORT_CHUNK_BATCHES = 64


def _sorted_batches(examples: tf.data.Dataset, batch_size: int,
                    ragged: bool) -> tf.data.Dataset:
    """{"element", "index"} batches, uncut: the examples in chunks of SORT_CHUNK_BATCHES
    batches, each chunk sorted by length (stably) and cut into batches of batch_size, so only
    a chunk's last batch is partial; "index" holds each example's position in the input.
    Every step works on whole chunks (a per-example map costs more than the model's forward
    pass on a short dev set)."""
    chunk = batch_size * SORT_CHUNK_BATCHES
    blocks = (examples.ragged_batch(chunk) if ragged else examples.batch(chunk)).enumerate()

    def split(number: tf.Tensor, *element: Any) -> tf.data.Dataset:
        element = element if len(element) > 1 else element[0]
        order = tf.argsort(_mask_lengths(_inputs(element), rank=1), stable=True)
        block = {"element": tf.nest.map_structure(lambda x: tf.gather(x, order), element),
                 "index": number * chunk + tf.cast(order, tf.int64)}
        rows = tf.data.Dataset.from_tensor_slices(block)
        return rows.ragged_batch(batch_size) if ragged else rows.batch(batch_size)

    return blocks.flat_map(split)


def _bucket_length(table: tf.Tensor, batch: dict[str, Any]) -> tf.Tensor:
    """The shortest bucket length that holds a batch's longest example."""
    longest = tf.reduce_max(_mask_lengths(_inputs(batch["element"]), rank=1))
    return table[tf.searchsorted(table, longest[None], side="left")[0]]


# model -> its predict step, traced once per model for the few lengths it sees (not once per
# predict_in_order call: a run scores dev after every epoch).
_PREDICT_STEPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _predict_step(model: Any) -> Any:
    """tf.function(inputs, index) -> (outputs, index) of `model`: with several replicas each
    batch is split across them under the model's strategy and the outputs (and positions)
    gathered back in batch order; with one replica the model is called as it is (the
    strategy's run and gather would only add per-batch work)."""
    if model in _PREDICT_STEPS:
        return _PREDICT_STEPS[model]
    strategy, owner = model.distribute_strategy, weakref.ref(model)
    if strategy.num_replicas_in_sync == 1:
        @tf.function(reduce_retracing=True)
        def step(inputs: Any, index: Any) -> tuple[Any, Any]:
            return owner()(inputs, training=False), index
    else:
        gather = lambda x: strategy.gather(x, axis=0)

        @tf.function(reduce_retracing=True)
        def step(inputs: Any, index: Any) -> tuple[Any, Any]:
            out = strategy.run(lambda x: owner()(x, training=False), args=(inputs,))
            return tf.nest.map_structure(gather, out), None if index is None else gather(index)

    _PREDICT_STEPS[model] = step
    return step


def predict_in_order(model: Any, batches: tf.data.Dataset, per_token: bool = False,
                     max_seq_length: int | None = None, pad_value: float = 0.0) -> Any:
    """A model's outputs over batches, in input order: numpy [N, ...] (or a dict of them).

    Batches with `example_index` in their input dict (`batch_by_length` without shuffle) are
    put back in the order of those positions; other batches are taken in order. Targets in
    the batches are ignored. Keras's `model.predict` cannot concatenate batches of different
    lengths (and would keep the bucket order): this loop calls the model in a tf.function (with
    several replicas under its distribution strategy: each batch split across them, the
    outputs gathered back).

    Args:
        model: keras.Model. Input dict -> a tensor or a dict of tensors.
        batches: tf.data.Dataset of `inputs` or `(inputs, *targets)` batches.
        per_token: bool. Every output is per token ([B, L, ...]): padded along axis 1 to
            max_seq_length with pad_value.
        max_seq_length: int, optional. The T per-token outputs are padded to (default: the
            longest L of the batches).
        pad_value: float. The value of per-token outputs past a bucket's length (e.g. a very
            low logit, so no decoder picks such a position).

    Raises:
        ValueError: the example positions are not 0 .. N-1, each once.
    """
    spec = _inputs(batches.element_spec)
    indexed = isinstance(spec, dict) and INDEX_KEY in spec

    def split(*element: Any) -> dict[str, Any]:
        inputs = dict(_inputs(element if len(element) > 1 else element[0]))
        return {"inputs": inputs, "index": inputs.pop(INDEX_KEY)} if indexed else {
            "inputs": inputs}

    strategy = model.distribute_strategy
    step = _predict_step(model)
    outputs: list[Any] = []
    positions: list[np.ndarray] = []
    seen = 0
    split_batches = batches.map(split)
    if strategy.num_replicas_in_sync > 1:
        split_batches = strategy.experimental_distribute_dataset(split_batches)
    for batch in split_batches:
        out, index = step(batch["inputs"], batch.get("index"))
        out = tf.nest.map_structure(lambda x: np.asarray(x), out)
        size = len(tf.nest.flatten(out)[0])
        positions.append(np.asarray(index) if indexed else np.arange(seen, seen + size))
        outputs.append(out)
        seen += size
    if not outputs:
        raise ValueError("predict_in_order: no batches")
    order = np.concatenate(positions)
    if not np.array_equal(np.sort(order), np.arange(len(order))):
        raise ValueError(f"predict_in_order: the batches' {INDEX_KEY} values are not 0 .. "
                         f"{len(order) - 1}, each once")
    inverse = np.argsort(order, kind="stable")
    if per_token:
        width = max_seq_length or max(x.shape[1] for o in outputs for x in tf.nest.flatten(o))
        pad = lambda x: np.pad(x, [(0, 0), (0, width - x.shape[1])] + [(0, 0)] * (x.ndim - 2),
                               constant_values=pad_value)
        outputs = [tf.nest.map_structure(pad, o) for o in outputs]
    joined = tf.nest.map_structure(lambda *xs: np.concatenate(xs)[inverse], *outputs)
    return joined

