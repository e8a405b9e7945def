"""tfbert's pretraining records (text pairs) -> the pretraining feature dict, in-graph.

Shape legend: B = batch, T = max_seq_length, P = max_predictions_per_seq.

A batch of parsed records (`tfbert.pretraining_data.records.parse_examples`) is tokenized (A and B
in one call), packed as [CLS] A [SEP] B [SEP] and masked
(`tfbert.pretraining_data.masking.DynamicMasker`). The same transform writes google-research/bert's
records once (`tfbert.pretraining_data.google_records.GoogleRecordEncoder`).
"""

from __future__ import annotations

import tensorflow as tf

from tfbert.pretraining_data.masking import DynamicMasker, continuation_flags, tokens_starting_words
from tfbert.text.packer import BertPacker
from tfbert.text.tokenizer import BertTokenizer

# Placeholder ids for packing token INDICES (see `_pack`).
_CLS, _SEP, _PAD, _FIRST = 0, 1, 2, 3


class PretrainingTransform:
    """Parsed text pairs -> the pretraining feature dict (one batch, in-graph).

    Args:
        vocab_file: str. WordPiece vocab.
        max_seq_length: int. T.
        max_predictions_per_seq: int. P.
        masked_lm_prob: float. Share of eligible tokens to predict.
        whole_word_mask: bool. Mask whole words: `##` pieces with their word, and with the
            records' jieba word starts (Chinese) all characters of a word together.
        lower_case: bool. As for `BertTokenizer`.
    """

    def __init__(self, vocab_file: str, max_seq_length: int, max_predictions_per_seq: int,
                 masked_lm_prob: float = 0.15, whole_word_mask: bool = False,
                 lower_case: bool = True):
        if max_predictions_per_seq > max_seq_length:
            raise ValueError(f"max_predictions_per_seq {max_predictions_per_seq} is larger than "
                             f"max_seq_length {max_seq_length}")
        self.tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)
        vocab = list(self.tokenizer.vocab)
        self.whole_word_mask = whole_word_mask
        self.max_seq_length = max_seq_length
        self.masker = DynamicMasker(vocab, max_predictions_per_seq, masked_lm_prob)
        self.continuation = tf.constant(continuation_flags(vocab))  # [V]
        self.specials = tf.constant([self.tokenizer.cls_id, self.tokenizer.sep_id,
                                     self.tokenizer.pad_id], tf.int32)
        # Packs token indices instead of ids, so the same truncation can be applied to the
        # ids and to the word-start flags (BertPacker is the one place that truncates).
        self.index_packer = BertPacker(max_seq_length, cls_id=_CLS, sep_id=_SEP, pad_id=_PAD)

    def _pack(self, ids_a: tf.RaggedTensor, ids_b: tf.RaggedTensor,
              flags_a: tf.RaggedTensor, flags_b: tf.RaggedTensor):
        """[CLS] A [SEP] B [SEP] packing of ids and of per-token word-start flags."""
        size_a = tf.size(ids_a.flat_values, out_type=tf.int32)
        size_b = tf.size(ids_b.flat_values, out_type=tf.int32)
        index_a = ids_a.with_flat_values(tf.range(size_a) + _FIRST)
        index_b = ids_b.with_flat_values(tf.range(size_b) + _FIRST + size_a)
        packed = self.index_packer((index_a, index_b))
        index = tf.cast(packed["input_ids"], tf.int32)  # [B, T]
        flat_ids = tf.concat([self.specials, tf.cast(ids_a.flat_values, tf.int32),
                              tf.cast(ids_b.flat_values, tf.int32)], axis=0)
        flat_flags = tf.concat([tf.ones([3], tf.bool), flags_a.flat_values,
                                flags_b.flat_values], axis=0)
        return (tf.gather(flat_ids, index), tf.cast(packed["input_mask"], tf.int32),
                tf.cast(packed["segment_ids"], tf.int32), tf.gather(flat_flags, index))

    def _tokenize(self, features: dict):
        """Token ids of A and B (one tokenizer call for both) and, per token, whether it
        starts a whole-masking word."""
        batch = tf.shape(features["text_a"])[0]
        texts = tf.concat([features["text_a"], features["text_b"]], axis=0)  # [2B]
        if not self.whole_word_mask:
            ids = self.tokenizer.tokenize(texts)  # [2B, (tokens)]
            flags = tf.ones_like(ids, tf.bool)
        else:
            ids, starts, _ = self.tokenizer.tokenize_with_offsets(texts)
            word_starts = tf.concat([features["word_starts_a"], features["word_starts_b"]], 0)
            new_word = tf.logical_not(tf.gather(self.continuation, ids.flat_values))
            in_words = tokens_starting_words(starts, word_starts)
            flags = ids.with_flat_values(tf.logical_and(new_word, in_words.flat_values))
        return ids[:batch], ids[batch:], flags[:batch], flags[batch:]

    def __call__(self, features: dict, seed: tf.Tensor) -> dict[str, tf.Tensor]:
        """features: parsed records (`records.parse_examples`) [B]; seed: int [2]."""
        ids_a, ids_b, flags_a, flags_b = self._tokenize(features)
        input_ids, input_mask, segment_ids, word_start = self._pack(ids_a, ids_b, flags_a,
                                                                    flags_b)
        masked = self.masker(input_ids, seed, word_start if self.whole_word_mask else None)
        return {
            "input_ids": masked["input_ids"],
            "input_mask": input_mask,
            "segment_ids": segment_ids,
            "masked_lm_positions": masked["masked_lm_positions"],
            "masked_lm_ids": masked["masked_lm_ids"],
            "masked_lm_weights": masked["masked_lm_weights"],
            "next_sentence_labels": tf.cast(features["next_sentence_labels"], tf.int32),
        }
