"""Packs one or two token segments into BERT's input dict, in core TensorFlow ops only.

`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, padded with [PAD] to `seq_length`. A pair that does
not fit is cut as the reference's `_truncate_seq_pair` does: one token at a time from the end of
the longer segment (from B when they are equally long). Its closed form, for L = seq_length - 3
free positions, is

    len_a = min(la, max(L - lb, ceil(L / 2)))
    len_b = min(lb, max(L - la, floor(L / 2)))

(transformers' Python tokenizer truncates the same way; the Rust `tokenizers` one gives the
shorter segment at most floor(L / 2), which differs when B is the longer one and L is odd.)

Only core ops (RaggedTensorToTensor, GatherV2, SelectV2, ...; no control flow), so exported
models load in TF Serving 2.12-2.20, whose bundled TF Text lacks newer ops such as
`TFText>RoundRobinTrim`. Tensors are compared with `tf.equal`, never Python `==` (which is object
identity once `tf.compat.v1.disable_v2_behavior()` has run), so the ids are the same in TF1 graph
mode (tests/test_packer.py runs it there).
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tfbert.text.keras_inputs import take_inputs_as_given


class BertPacker(keras.layers.Layer):
    """Token segments -> `input_ids`, `input_mask`, `segment_ids` (int32 [B, seq_length]).

    Args:
        seq_length: int. Length of the packed sequences (>= 2; >= 3 for pairs).
        cls_id: int. Id of [CLS].
        sep_id: int. Id of [SEP].
        pad_id: int. Id of [PAD].

    Example:
    >>> from tfbert import BertTokenizer
    >>> tokenizer = BertTokenizer("vocab.txt")
    >>> packer = BertPacker.from_tokenizer(tokenizer, seq_length=8)
    >>> one = packer(tokenizer.tokenize(tf.constant(["今天天气"])))  # one segment
    >>> one["segment_ids"].numpy().tolist()
    [[0, 0, 0, 0, 0, 0, 0, 0]]
    >>> pair = packer((tokenizer.tokenize(tf.constant(["今天"])),
    ...                tokenizer.tokenize(tf.constant(["天气很好"]))))  # a pair
    >>> pair["segment_ids"].numpy().tolist(), pair["input_mask"].numpy().tolist()
    ([[0, 0, 0, 0, 1, 1, 1, 1]], [[1, 1, 1, 1, 1, 1, 1, 1]])
    """

    def __init__(self, seq_length: int, cls_id: int, sep_id: int, pad_id: int, **kwargs: Any):
        kwargs.setdefault("dtype", "int32")
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        take_inputs_as_given(self)  # ragged tensors, tuples, Python strings
        self.built = True
        if int(seq_length) < 2:
            raise ValueError(f"seq_length {seq_length} is too short: [CLS] and [SEP] alone need 2")
        # === Config ===
        self.seq_length = int(seq_length)
        self.cls_id, self.sep_id, self.pad_id = int(cls_id), int(sep_id), int(pad_id)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, seq_length: int, **kwargs: Any) -> BertPacker:
        """A packer with the special ids of a `tfbert.BertTokenizer`."""
        return cls(seq_length, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                   pad_id=tokenizer.pad_id, **kwargs)

    def call(self, inputs: Any) -> dict[str, tf.Tensor]:
        """Packs segments.

        Args:
            inputs: int [B, (tokens)] (ragged, or dense without padding), or a tuple/list of
                two of them (segments A and B). A single unbatched [tokens] row also works.

        Returns:
            dict of int32 `input_ids`, `input_mask`, `segment_ids`, each [B, seq_length]
            ([seq_length] for an unbatched row).
        """
        segments = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
        if len(segments) not in (1, 2):
            raise ValueError(f"BertPacker packs one or two segments, got {len(segments)}")
        if len(segments) == 2 and self.seq_length < 3:
            raise ValueError(f"seq_length {self.seq_length} cannot hold a pair "
                             "([CLS] A [SEP] B [SEP] needs at least 3)")
        unbatched = not isinstance(segments[0], tf.RaggedTensor) and tf.convert_to_tensor(
            segments[0]).shape.rank == 1
        segments = [_as_ragged(s, unbatched) for s in segments]  # int32 [B, (tokens)]

        lengths = [tf.cast(seg.row_lengths(), tf.int32) for seg in segments]  # [B] each
        if len(segments) == 1:
            keep = [tf.minimum(lengths[0], self.seq_length - 2)]
        else:
            free = self.seq_length - 3
            la, lb = lengths
            keep = [tf.minimum(la, tf.maximum(free - lb, (free + 1) // 2)),
                    tf.minimum(lb, tf.maximum(free - la, free // 2))]

        # Dense positions: [CLS] a_0 .. a_{ka-1} [SEP] (b_0 .. b_{kb-1} [SEP]) [PAD] ...
        t = tf.range(self.seq_length)[tf.newaxis, :]  # [1, T]
        ka = keep[0][:, tf.newaxis]  # [B, 1]
        dense_a = segments[0].to_tensor(0, shape=[None, self.seq_length])  # [B, T]
        shifted_a = tf.gather(dense_a, tf.maximum(t[0] - 1, 0), axis=1)  # a_{t-1} at t
        ids = tf.where(t <= ka, shifted_a, self.pad_id)
        ids = tf.where(tf.equal(t, ka + 1), self.sep_id, ids)
        end = ka + 2  # one past the last [SEP]
        segment_ids = tf.zeros_like(ids)
        if len(segments) == 2:
            kb = keep[1][:, tf.newaxis]
            dense_b = segments[1].to_tensor(0, shape=[None, self.seq_length])
            in_b = (t >= ka + 2) & (t <= ka + kb + 1)
            ids = tf.where(in_b, tf.gather(dense_b, tf.clip_by_value(t - ka - 2, 0,
                                                                     self.seq_length - 1),
                                           batch_dims=1), ids)
            ids = tf.where(tf.equal(t, ka + kb + 2), self.sep_id, ids)
            end = ka + kb + 3
            segment_ids = tf.cast((t >= ka + 2) & (t < end), tf.int32)
        ids = tf.where(tf.equal(t, 0), self.cls_id, ids)
        out = {"input_ids": ids, "input_mask": tf.cast(t < end, tf.int32),
               "segment_ids": segment_ids}
        if unbatched:
            out = {name: value[0] for name, value in out.items()}
        return out

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"seq_length": self.seq_length, "cls_id": self.cls_id,
                       "sep_id": self.sep_id, "pad_id": self.pad_id})
        return config


def _as_ragged(x: Any, unbatched: bool) -> tf.RaggedTensor:
    """int32 ragged [B, (tokens)] (int64 row splits) from ragged or dense token ids."""
    if not isinstance(x, tf.RaggedTensor):
        x = tf.convert_to_tensor(x)
        if x.shape.rank != (1 if unbatched else 2):
            raise ValueError(f"BertPacker expects token ids [B, (tokens)] or one row [tokens], "
                             f"got shape {x.shape}")
        x = tf.RaggedTensor.from_tensor(x[tf.newaxis] if unbatched else x)
    if x.ragged_rank != 1:
        raise ValueError(f"BertPacker expects ragged ids [B, (tokens)], got ragged rank "
                         f"{x.ragged_rank}")
    return x.with_flat_values(tf.cast(x.flat_values, tf.int32)).with_row_splits_dtype(tf.int64)
