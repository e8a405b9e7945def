"""google-research/bert's pretraining records: read them (stored or fresh masks) and write them.

Shape legend: B = batch, T = max_seq_length, P = max_predictions_per_seq.

google-research/bert's `create_pretraining_data.py` (and NVIDIA's and Model Garden's scripts,
which write and read the same features) stores one `tf.train.Example` per sentence pair, masks
already applied:

| feature                | type          | shape | meaning                                      |
|------------------------|---------------|-------|----------------------------------------------|
| `input_ids`            | int64         | [T]   | [CLS] A [SEP] B [SEP], masked, 0-padded       |
| `input_mask`           | int64         | [T]   | 1 at real tokens                             |
| `segment_ids`          | int64         | [T]   | 0 for [CLS] A [SEP], 1 for B [SEP]            |
| `masked_lm_positions`  | int64         | [P]   | masked positions, 0-padded                   |
| `masked_lm_ids`        | int64         | [P]   | the original token at each position          |
| `masked_lm_weights`    | float         | [P]   | 1.0 at real predictions, 0.0 at padding      |
| `next_sentence_labels` | int64         | [1]   | 0 = IsNext, 1 = NotNext                      |

Reading (`GoogleRecordsTransform`). By default the original sequence is restored (the stored
`masked_lm_ids` put back at `masked_lm_positions` where the weight is 1) and masked afresh with
`tfbert.pretraining_data.masking.DynamicMasker`, the masker tfbert's own records go through: new
masks every epoch, 15% of the non-special tokens chosen, 80% [MASK] / 10% random / 10% kept. With
`static_masking` the stored masks are used as they are, which is google-research/bert's own
behaviour (for reproducing its runs). Whole-word masking of such records groups a token with its
`##` pieces (the records hold no word boundaries beyond those).

Writing (`GoogleRecordEncoder`). tfbert's instances (text pairs) go through tfbert's own tokenize ->
pack -> mask transform (`tfbert.pretraining_data.features.PretrainingTransform`) once, with a seed
per batch of instances, and the result is frozen into records of the table's features and dtypes.
Those records are what google-research/bert's `run_pretraining.py` input_fn parses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from tfbert.pretraining_data.features import PretrainingTransform
from tfbert.pretraining_data.masking import DynamicMasker, continuation_flags

# name -> the tf.train.Feature kind it is stored as (what tells the format apart).
GOOGLE_FEATURES = {
    "input_ids": "int64", "input_mask": "int64", "segment_ids": "int64",
    "masked_lm_positions": "int64", "masked_lm_ids": "int64", "masked_lm_weights": "float",
    "next_sentence_labels": "int64",
}
_SEQUENCE = ("input_ids", "input_mask", "segment_ids")


def feature_spec(max_seq_length: int, max_predictions_per_seq: int
                 ) -> dict[str, tf.io.FixedLenFeature]:
    """The parsing spec of google-format records (the one google-research/bert's input_fn
    uses): FixedLenFeature [T] / [P] / [1] of int64, masked_lm_weights float32."""
    spec = {}
    for name, kind in GOOGLE_FEATURES.items():
        width = (max_seq_length if name in _SEQUENCE
                 else 1 if name == "next_sentence_labels" else max_predictions_per_seq)
        spec[name] = tf.io.FixedLenFeature([width], tf.float32 if kind == "float" else tf.int64)
    return spec


def restore_original_ids(input_ids: tf.Tensor, masked_lm_positions: tf.Tensor,
                         masked_lm_ids: tf.Tensor, masked_lm_weights: tf.Tensor) -> tf.Tensor:
    """The unmasked sequence: each stored original id put back at its position.

    Args:
        input_ids: int [B, T]. Masked ids.
        masked_lm_positions: int [B, P]. Masked positions (padding: 0).
        masked_lm_ids: int [B, P]. Original ids at those positions.
        masked_lm_weights: float [B, P]. 1.0 at real predictions; others are left alone.

    Returns:
        int32 [B, T].
    """
    input_ids = tf.cast(input_ids, tf.int32)
    positions = tf.cast(masked_lm_positions, tf.int32)
    real = masked_lm_weights > 0  # [B, P]
    rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
    index = tf.stack([tf.boolean_mask(rows, real), tf.boolean_mask(positions, real)], axis=1)
    return tf.tensor_scatter_nd_update(input_ids, index,
                                       tf.boolean_mask(tf.cast(masked_lm_ids, tf.int32), real))


class GoogleRecordsTransform:
    """Parsed google-format records -> the pretraining feature dict (one batch, in-graph).

    Args:
        vocab: sequence of str. The WordPiece vocab the records' ids come from (id order).
        max_predictions_per_seq: int. P of the output (and, with static_masking, of the
            records).
        masked_lm_prob: float. Share of non-special tokens to predict (fresh masks).
        whole_word_mask: bool. Fresh masks take a token with its `##` pieces.
        static_masking: bool. Keep the stored masks instead of drawing fresh ones.
    """

    def __init__(self, vocab: Sequence[str], max_predictions_per_seq: int,
                 masked_lm_prob: float = 0.15, whole_word_mask: bool = False,
                 static_masking: bool = False):
        self.static_masking = static_masking
        self.whole_word_mask = whole_word_mask
        self.masker = DynamicMasker(list(vocab), max_predictions_per_seq, masked_lm_prob)
        self.continuation = tf.constant(continuation_flags(vocab))  # [V]
        self.pad_id = list(vocab).index("[PAD]") if "[PAD]" in vocab else 0

    def __call__(self, features: dict, seed: tf.Tensor) -> dict[str, tf.Tensor]:
        """features: parsed with `feature_spec` [B, ...]; seed: int [2]."""
        ints = {k: tf.cast(v, tf.int32) for k, v in features.items() if k != "masked_lm_weights"}
        out = {"input_mask": ints["input_mask"], "segment_ids": ints["segment_ids"],
               "next_sentence_labels": ints["next_sentence_labels"][:, 0]}
        if self.static_masking:
            out.update(input_ids=ints["input_ids"],
                       masked_lm_positions=ints["masked_lm_positions"],
                       masked_lm_ids=ints["masked_lm_ids"],
                       masked_lm_weights=tf.cast(features["masked_lm_weights"], tf.float32))
            return out
        original = restore_original_ids(ints["input_ids"], ints["masked_lm_positions"],
                                        ints["masked_lm_ids"], features["masked_lm_weights"])
        real = tf.cast(ints["input_mask"], tf.bool)  # [B, T]
        # Padding is id 0 in the records; the masker knows padding as [PAD].
        ids = tf.where(real, original, self.pad_id)
        word_start = (tf.logical_not(tf.gather(self.continuation, ids))
                      if self.whole_word_mask else None)
        masked = self.masker(ids, seed, word_start)
        out.update(masked)
        out["input_ids"] = tf.where(real, masked["input_ids"], original)
        return out


def make_google_example(features: dict[str, np.ndarray]) -> bytes:
    """Serializes one google-format record from int arrays [T] / [P] and a label (the
    table's features in its order; masked_lm_weights as float)."""
    feature = {}
    for name, kind in GOOGLE_FEATURES.items():
        values = np.atleast_1d(features[name])
        if kind == "float":
            feature[name] = tf.train.Feature(
                float_list=tf.train.FloatList(value=values.astype(np.float32).tolist()))
        else:
            feature[name] = tf.train.Feature(
                int64_list=tf.train.Int64List(value=values.astype(np.int64).tolist()))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


class GoogleRecordEncoder:
    """tfbert instances -> google-format records with static masks, a batch at a time.

    Args:
        vocab_file: str. WordPiece vocab.
        max_seq_length: int. T.
        max_predictions_per_seq: int. P.
        masked_lm_prob: float. Share of non-special tokens to predict.
        whole_word_mask: bool. Mask whole words (`##` pieces with their word, and the
            instances' jieba words when they carry word starts).
        lower_case: bool. As for `BertTokenizer`.
        seed: int. Mask seed: batch i is masked with stateless seed (seed, i).
        batch_size: int. Instances masked together.

    Example:
    >>> encoder = GoogleRecordEncoder("vocab.txt", 128, 20, seed=12345)
    >>> records = [r for i in instances for r in encoder.add(i)]  # doctest: +SKIP
    >>> records += encoder.flush()  # doctest: +SKIP
    """

    def __init__(self, vocab_file: str, max_seq_length: int, max_predictions_per_seq: int,
                 masked_lm_prob: float = 0.15, whole_word_mask: bool = False,
                 lower_case: bool = True, seed: int = 12345, batch_size: int = 256):
        self.transform = PretrainingTransform(vocab_file, max_seq_length,
                                              max_predictions_per_seq, masked_lm_prob,
                                              whole_word_mask, lower_case)
        self.seed = seed
        self.batch_size = batch_size
        self._pending: list = []
        self._batches = 0
        self._encode = tf.function(self.transform.__call__, reduce_retracing=True)

    def add(self, instance) -> list[bytes]:
        """Queues one `tfbert.pretraining_data.instances.Instance`; returns the records of a full
        batch (else [])."""
        self._pending.append(instance)
        return self.flush() if len(self._pending) >= self.batch_size else []

    def flush(self) -> list[bytes]:
        """The records of the queued instances, in order."""
        if not self._pending:
            return []
        batch, self._pending = self._pending, []

        def starts(values):
            return tf.ragged.constant([list(v or ()) for v in values], dtype=tf.int64,
                                      ragged_rank=1, inner_shape=())

        features = {
            "text_a": tf.constant([i.text_a for i in batch]),
            "text_b": tf.constant([i.text_b for i in batch]),
            "next_sentence_labels": tf.constant([i.next_sentence_label for i in batch],
                                                tf.int64),
            "word_starts_a": starts(i.word_starts_a for i in batch),
            "word_starts_b": starts(i.word_starts_b for i in batch),
        }
        seed = tf.constant([self.seed, self._batches], tf.int64)
        self._batches += 1
        out = {k: v.numpy() for k, v in self._encode(features, seed).items()}
        return [make_google_example({k: v[row] for k, v in out.items()})
                for row in range(len(batch))]
