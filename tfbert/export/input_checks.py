"""What the serving signatures accept, checked in the graph before anything else runs.

TF Serving passes tensors of any shape through to the graph and answers a failed check with
INVALID_ARGUMENT and its message; a message names the input and the bad value ("input_ids
holds 99999, outside [0, 21128)"). `serve_ids` takes `ID_INPUTS`, `serving_default` text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

ID_INPUTS = ("input_ids", "input_mask", "segment_ids")

# A check: (holds: bool scalar, message template with {} per value, values). A stage is a
# function from the tensors to its checks; enforce calls each stage on tensors that exist only
# once the previous stage's checks held, so no op of a later stage (a reduction over axes a
# bad shape lacks, say) can run, and fail with TensorFlow's own message, before them.
Check = tuple[tf.Tensor, str, list[tf.Tensor]]
Stage = Callable[[dict[str, tf.Tensor]], list[Check]]


def id_input_checks(seq_length: int, ranges: dict[str, int], fed_shapes: bool = True
                    ) -> list[Stage]:
    """serve_ids' contract in two stages: shapes [B, T] alike, then values in range.

    Args:
        seq_length: int. T.
        ranges: {name: n}: the input's values must lie in [0, n) (vocab_size,
            type_vocab_size, 2 for the mask).
        fed_shapes: bool. Read each input's shape with `fed_shape` (SavedModel signatures);
            False reads tf.shape (TFLite, which has no SerializeTensor and checks input ranks
            when it prepares the model).

    The stages take {"input_ids", "input_mask", "segment_ids": int32 tensors of any shape}.
    """
    shape_of = fed_shape if fed_shapes else tf.shape

    def shapes(inputs: dict[str, tf.Tensor]) -> list[Check]:
        checks = []
        for name in ID_INPUTS:
            shape = shape_of(inputs[name])
            holds = tf.equal(tf.size(shape), 2) & tf.reduce_all(
                tf.equal(shape[1:], seq_length))  # (shape[1:] is empty below rank 2)
            checks.append((holds, f"{name} has shape {{}}, expected [B, {seq_length}]", [shape]))
        sizes = [tf.size(inputs[name]) for name in ID_INPUTS]
        checks.append((tf.equal(sizes[0], sizes[1]) & tf.equal(sizes[0], sizes[2]),
                       "input_ids, input_mask and segment_ids have shapes {}, {} and {}; they "
                       "must have the same shape", [tf.shape(inputs[name]) for name in ID_INPUTS]))
        return checks

    def values(inputs: dict[str, tf.Tensor]) -> list[Check]:
        checks = []
        for name in ("input_ids", "segment_ids", "input_mask"):
            flat = tf.reshape(inputs[name], [-1])  # (reduce over what was fed, not the spec)
            low, high = tf.reduce_min(flat), tf.reduce_max(flat)  # (no error if empty)
            n = ranges[name]
            allowed = "not 0 or 1" if name == "input_mask" else f"outside [0, {n})"
            checks.append(((low >= 0) & (high < n), f"{name} holds {{}}, {allowed}",
                           [tf.where(high >= n, high, low)]))
        return checks

    return [shapes, values]


def text_input_checks(has_text_b: bool, max_chars: int = 0) -> list[Stage]:
    """serving_default's contract: `text` (and `text_b`) rank 1, as many of each, and at most
    `max_chars` characters in all (ExportSpec.max_request_chars; 0: no limit)."""
    def ranks(strings: dict[str, tf.Tensor]) -> list[Check]:
        checks = []
        for name, x in strings.items():
            shape = fed_shape(x)
            checks.append((tf.equal(tf.size(shape), 1), f"{name} has shape {{}}, expected [B] "
                           "(one string per example)", [shape]))
        return checks

    def counts(strings: dict[str, tf.Tensor]) -> list[Check]:
        a, b = tf.size(strings["text"]), tf.size(strings["text_b"])
        return [(tf.equal(a, b), "text has {} strings and text_b {}: text and text_b must "
                 "have the same number of strings", [a, b])]

    def size(strings: dict[str, tf.Tensor]) -> list[Check]:
        total = tf.add_n([tf.reduce_sum(tf.cast(tf.strings.length(x, unit="UTF8_CHAR"),
                                                tf.int64)) for x in strings.values()])
        names = " and ".join(strings)
        return [(total <= max_chars, f"{names} hold{'' if has_text_b else 's'} {{}} characters "
                 f"in all, over the limit of this model (max_request_chars {max_chars}): send "
                 "fewer or shorter texts per request", [total])]

    stages = [ranks, counts] if has_text_b else [ranks]
    return stages + [size] if max_chars else stages


def fed_shape(x: tf.Tensor) -> tf.Tensor:
    """The shape of the tensor fed, int32 [rank], as only the run knows it.

    TF Serving feeds a signature tensors of any shape, and so does a loaded SavedModel's
    signature called from Python; but Grappler folds tf.rank (and the length of tf.shape) of an
    input to the signature's static rank, so a rank check on them always holds. The shape's
    round trip through SerializeTensor and ParseTensor (core ops, in every TF Serving release)
    gives a vector whose length Grappler cannot know.
    """
    return tf.io.parse_tensor(tf.io.serialize_tensor(tf.shape(x)), tf.int32)


def enforce(tensors: dict[str, tf.Tensor], stages: list[Stage]) -> dict[str, tf.Tensor]:
    """`tensors`, passed on only after every check held (tf.debugging.Assert, stage by stage);
    a failed check raises InvalidArgumentError "assertion failed: [MESSAGE]"."""
    for stage in stages:
        asserts = [tf.debugging.Assert(holds, [tf.strings.format(message, values)])
                   for holds, message, values in stage(tensors)]
        with tf.control_dependencies(asserts):
            tensors = {name: tf.identity(x) for name, x in tensors.items()}
    return tensors


def id_ranges(model: Any) -> dict[str, int]:
    """{input: n}: serve_ids' inputs take values in [0, n), from the config of `model` (a
    BertEncoder, or a task model holding one as `encoder`)."""
    config = getattr(model, "encoder", model).config
    return {"input_ids": config.vocab_size, "segment_ids": config.type_vocab_size,
            "input_mask": 2}
