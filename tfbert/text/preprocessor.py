"""Raw text to BERT's input dict: `BertTokenizer` then `BertPacker`, usable in `tf.data.map`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tfbert.text.keras_inputs import take_inputs_as_given
from tfbert.text.packer import BertPacker
from tfbert.text.tokenizer import MAX_CHARS_PER_WORD, BertTokenizer


class BertPreprocessor(keras.layers.Layer):
    """Strings (or pairs of strings) -> `input_ids`, `input_mask`, `segment_ids` [B, seq_length].

    Args:
        vocab_file: str or sequence of str. vocab.txt, or its tokens in id order.
        seq_length: int. Packed length.
        lower_case: bool. As for `BertTokenizer`.
        max_chars_per_word: int. As for `BertTokenizer` (100, `tokenizers`' limit; 200 is
            Google's tokenization.py's).

    Example:
    >>> pre = BertPreprocessor("vocab.txt", seq_length=128)
    >>> {name: t.shape.as_list() for name, t in pre(tf.constant(["一句话"])).items()}
    {'input_ids': [1, 128], 'input_mask': [1, 128], 'segment_ids': [1, 128]}
    >>> ds = tf.data.Dataset.from_tensor_slices((["问题"], ["上下文"], [1]))
    >>> ds = ds.batch(1).map(lambda a, b, y: (pre((a, b)), y))  # pairs, in tf.data
    """

    def __init__(self, vocab_file: str | Sequence[str], seq_length: int, lower_case: bool = True,
                 max_chars_per_word: int = MAX_CHARS_PER_WORD, **kwargs: Any):
        kwargs.setdefault("dtype", "int32")
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        take_inputs_as_given(self)  # ragged tensors, tuples, Python strings
        self.built = True
        # === Layers ===
        self.tokenizer = BertTokenizer(vocab_file, lower_case=lower_case,
                                       max_chars_per_word=max_chars_per_word)
        self.packer = BertPacker.from_tokenizer(self.tokenizer, seq_length)
        # === Config ===
        self.seq_length = int(seq_length)
        self.lower_case = bool(lower_case)

    def call(self, inputs: Any) -> dict[str, tf.Tensor]:
        """Tokenizes and packs.

        Args:
            inputs: tf.string [B], or a tuple/list (texts_a [B], texts_b [B]).

        Returns:
            dict of int32 `input_ids`, `input_mask`, `segment_ids`, each [B, seq_length].
        """
        if isinstance(inputs, (tuple, list)):
            if len(inputs) != 2:
                raise ValueError(f"BertPreprocessor takes texts or a pair (texts_a, texts_b), "
                                 f"got {len(inputs)} inputs")
            texts_a = tf.convert_to_tensor(inputs[0], tf.string)
            texts_b = tf.convert_to_tensor(inputs[1], tf.string)
            if texts_a.shape.rank == 0:  # one unbatched pair
                packed = self.call((texts_a[tf.newaxis], texts_b[tf.newaxis]))
                return {name: value[0] for name, value in packed.items()}
            # One tokenizer call for both segments.
            ids = self.tokenizer.tokenize(tf.concat([texts_a, texts_b], axis=0))  # [2B, (T)]
            batch = tf.shape(texts_a)[0]
            return self.packer((ids[:batch], ids[batch:]))
        return self.packer(self.tokenizer.tokenize(inputs))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"vocab_file": self.tokenizer.vocab, "seq_length": self.seq_length,
                       "lower_case": self.lower_case,
                       "max_chars_per_word": self.tokenizer.max_chars_per_word})
        return config
