"""The NER head's export: tags per piece, words, and entities read with conlleval's rules.

Shape legend: B = batch, T = max_seq_length, C = tags, E = entities in the batch's busiest row
(dynamic, >= 0). serving_default and serve_ids return logits [B, T, C], tag_ids [B, T] int32
(-1 off the text: [CLS], [SEP], padding), tags [B, T] string ("" off the text), entity_labels
[B, E] string, entity_count [B] int32, and
  serving_default: token_starts/token_ends [B, T] int32 (character span of each word piece, -1
  off the text), entity_starts/entity_ends [B, E] int32 (characters of `text`, end exclusive),
  entity_texts [B, E] string;
  serve_ids: entity_token_starts/entity_token_ends [B, E] int32 (packed positions of the
  entity's first word piece / one past its last).
Padding entities (index >= entity_count) have -1 offsets and "" strings.

With long_input "windows", per piece of the whole text instead of per packed position, P =
pieces of the batch's longest text (dynamic, >= 0): logits [B, P, C] (each piece's from the
window where it has the most context, 0 past the text), tag_ids [B, P] (-1 past the text), tags
[B, P], token_starts/token_ends [B, P] (characters of each piece, -1 past the text); the entity
outputs [B, E] as above, offsets into the full text; and word-level outputs, Wd = words of the
batch's wordiest text: word_count [B], word_tags [B, Wd] string, word_starts/word_ends [B, Wd]
int32 (characters, end exclusive; "" / -1 past a text's words). Words are the model's tokens:
whitespace-separated words (token_separator " "), or characters ("": a piece covering several
characters spreads its tag over them, B-X I-X ..., as training's decode does).

Decoding follows training: each word's tag is its first word piece's (as the fine-tuning labels
were placed); a CRF model (BertTokenClassifier(crf=True)) picks tags by Viterbi over the pieces
it chains (each word's first piece, or every piece with label_alignment "all"), the other pieces
taking their word's tag.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfbert.data.tags import PREFIXES, spread
from tfbert.errors import UserError
from tfbert.tasks import serving_windows as windows
from tfbert.tasks.serving_base import ServingHead
from tfbert.tasks.serving_ops import dense, pad_positions, segment_lengths, substr

# The prefix codes of the in-graph chunk rule (`chunk_starts`): 0 = O, then data.tags.PREFIXES.
TAG_PREFIXES = {"O": 0, **{p: i + 1 for i, p in enumerate(PREFIXES)}}


class NerHead(ServingHead):
    name = "ner"
    needs_labels = True
    windows = True
    metadata_keys = ("long_input", "doc_stride", "token_separator", "label_alignment")

    @classmethod
    def spec_fields(cls, model: Any, metadata: dict[str, Any], model_dir: str) -> dict[str, Any]:
        labels = metadata.get("labels")
        if labels is None or len(labels) != model.num_classes:
            raise UserError(f"{model_dir}: {len(labels or [])} labels in tfbert.json for a "
                            f"model with {model.num_classes} classes")
        return {**super().spec_fields(model, metadata, model_dir), "labels": labels}

    @classmethod
    def check_spec(cls, spec: Any) -> None:
        super().check_spec(spec)
        for tag in spec.labels:
            prefix, _, kind = tag.partition("-")
            if tag != "O" and (prefix not in PREFIXES or not kind):
                raise UserError(f"saved_model.py: NER tag {tag!r} is not 'O' or B/I/E/S-TYPE")

    def __init__(self, model: Any, spec: Any, module: Any) -> None:
        super().__init__(model, spec, module)
        labels = spec.labels
        self.crf = getattr(model, "crf", None)
        self._tag_prefix = tf.constant([TAG_PREFIXES[t.partition("-")[0]] for t in labels],
                                       tf.int32)  # [C]
        kinds = sorted({t.partition("-")[2] for t in labels if t != "O"})
        self._tag_kind = tf.constant(
            [kinds.index(t.partition("-")[2]) + 1 if t != "O" else 0 for t in labels],
            tf.int32)  # [C]
        self._kind_names = tf.constant([""] + kinds, tf.string)
        # Tag ids of a piece's first / middle / last character when one piece holds several
        # (B-X: B I I, S-X: B I E, E-X: I I E); the tag itself where the label set lacks one.
        index = {name: i for i, name in enumerate(labels)}
        self._spread_tags = [tf.constant([index.get(spread(t, 3)[part], i)
                                          for i, t in enumerate(labels)], tf.int32)
                             for part in range(3)]  # 3 x [C]

    def model_outputs(self, outputs: Any, seq_length: int) -> dict[str, tf.Tensor]:
        return {"logits": pad_positions(tf.cast(outputs, tf.float32), seq_length)}

    def window_shapes(self) -> dict[str, list[int | None]]:
        return {"logits": [None, self.spec.seq_length, len(self.spec.labels)]}

    def merge_windows(self, outputs: dict[str, tf.Tensor], win: dict[str, tf.Tensor]
                      ) -> dict[str, tf.Tensor]:
        """Piece p of row b from the window best[b, p] where it has the most context, at
        packed position 1 + p - start."""
        row, start = win["row"], win["start"]
        best = windows.max_context(row, start, win["length"], win["lengths"])  # [B, P]
        on_text = best >= 0
        window = tf.maximum(best, 0)
        position = tf.where(on_text, 1 + tf.range(tf.shape(best)[1])[tf.newaxis, :]
                            - tf.gather(start, window), 0)
        logits = tf.gather_nd(outputs["logits"], tf.stack([window, position], -1))  # [B, P, C]
        logits = tf.where(on_text[:, :, tf.newaxis], logits, 0.0)
        pieces = {"ids": dense(win["ids"], 0), "starts": dense(win["starts"], -1),
                  "ends": dense(win["ends"], -1), "on_text": on_text, "text": win["text"]}
        return self.outputs_of_pieces(logits, pieces, words=True)

    def decode(self, inputs: dict[str, tf.Tensor] | None, outputs: dict[str, tf.Tensor],
               chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        """NER outputs of packed windows [B, T]: the pieces sit at positions 1 .. len(a)."""
        t, logits = self.spec.seq_length, outputs["logits"]
        la, _ = segment_lengths(inputs)
        pos = tf.range(t)[tf.newaxis, :]  # [1, T]
        pieces = {"ids": inputs["input_ids"], "on_text": (pos >= 1) & (pos <= la[:, None])}
        if chars is not None:
            pieces.update(chars)
        out = self.outputs_of_pieces(logits, pieces, words=False)
        if chars is None:
            out["entity_token_starts"] = out.pop("entity_first")
            out["entity_token_ends"] = out.pop("entity_end")
        else:
            del out["entity_first"], out["entity_end"]
        return out

    def outputs_of_pieces(self, logits: tf.Tensor, pieces: dict[str, tf.Tensor], words: bool
                     ) -> dict[str, tf.Tensor]:
        """Tags, words and entities from per-position logits [B, N, C].

        pieces: "ids" [B, N] (word piece ids), "on_text" [B, N] (the position holds a piece of
        the text), and with the text, "starts"/"ends" [B, N] (its characters) and "text" [B].
        A word is a piece plus the pieces that continue it (ExportSpec.token_separator); its
        tag is its first piece's (softmax argmax, or the CRF's Viterbi path over the chained
        pieces). With `words`, also the word-level outputs.
        """
        spec = self.spec
        n = tf.shape(logits)[1]
        on_text = pieces["on_text"]
        batch = tf.shape(logits)[0]
        pos = tf.range(n)[tf.newaxis, :] + tf.zeros([batch, 1], tf.int32)  # [B, N]
        # A word = a piece that starts one, plus the pieces after it that continue it.
        if spec.token_separator == "":
            word_start = on_text
        elif spec.token_separator == " " and "starts" in pieces:  # a gap before the piece
            previous_end = tf.pad(pieces["ends"][:, :-1], [[0, 0], [1, 0]], constant_values=-1)
            word_start = on_text & (pieces["starts"] > previous_end)
        else:
            word_start = on_text & ~tf.gather(self.module.continuation, pieces["ids"])
        word_of_pos = tf.cumsum(tf.cast(word_start, tf.int32), axis=1) - 1  # [B, N]
        in_word = on_text & (word_of_pos >= 0)
        num_words = tf.reduce_sum(tf.cast(word_start, tf.int32), axis=1)  # [B]
        # Word-level arrays [B, W=N]: first position, last position.
        rows = tf.range(batch)[:, None] + tf.zeros_like(pos)  # [B, N]
        seg = tf.where(in_word, rows * n + word_of_pos, batch * n)  # overflow bucket
        n_seg = batch * n + 1
        first = tf.reshape(tf.math.unsorted_segment_min(pos, seg, n_seg)[:-1], [batch, n])
        last = tf.reshape(tf.math.unsorted_segment_max(pos, seg, n_seg)[:-1], [batch, n])
        is_word = tf.range(n)[tf.newaxis, :] < num_words[:, None]  # [B, W]
        first = tf.where(is_word, first, 0)
        last = tf.where(is_word, last, 0)
        crf = self.crf
        if crf is None:
            raw = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B, N]
        else:  # Viterbi over the chained pieces; the other pieces take their word's tag
            chain = word_start if spec.label_alignment == "first" else on_text
            path = tf.cast(crf(logits, chain), tf.int32)  # [B, N], -1 off the chain
            word_tag = tf.gather(path, tf.gather(first, tf.maximum(word_of_pos, 0),
                                                 batch_dims=1), batch_dims=1)
            raw = tf.maximum(tf.where(chain, path, word_tag), 0)
        tag_ids = tf.where(on_text, raw, -1)
        tags = tf.where(on_text, tf.gather(self.module.label_names, raw), "")
        word_tag = tf.where(is_word, tf.gather(raw, first, batch_dims=1), -1)  # [B, W]
        prefix = tf.where(is_word, tf.gather(self._tag_prefix, tf.maximum(word_tag, 0)), 0)
        kind = tf.where(is_word, tf.gather(self._tag_kind, tf.maximum(word_tag, 0)), 0)
        starts_chunk = chunk_starts(prefix, kind)  # [B, W]
        chunk = tf.cumsum(tf.cast(starts_chunk, tf.int32), axis=1) - 1  # [B, W]
        count = tf.reduce_sum(tf.cast(starts_chunk, tf.int32), axis=1)  # [B]
        num_entities = tf.maximum(tf.reduce_max(tf.concat([count, [0]], 0)), 0)  # E
        in_entity = (prefix > 0) & (chunk >= 0)
        eseg = tf.where(in_entity, rows * n + chunk, batch * n)
        e_first = tf.reshape(tf.math.unsorted_segment_min(first, eseg, n_seg)[:-1], [batch, n])
        e_last = tf.reshape(tf.math.unsorted_segment_max(last, eseg, n_seg)[:-1], [batch, n])
        e_kind = tf.reshape(tf.math.unsorted_segment_max(kind, eseg, n_seg)[:-1], [batch, n])
        # Keep E columns; padding entities get -1 / "".
        valid = tf.range(num_entities)[tf.newaxis, :] < count[:, None]  # [B, E]
        e_first = tf.where(valid, e_first[:, :num_entities], -1)
        e_last = tf.where(valid, e_last[:, :num_entities], -1)
        e_labels = tf.where(valid, tf.gather(self._kind_names,
                                             tf.maximum(e_kind[:, :num_entities], 0)), "")
        out = {"logits": logits, "tag_ids": tag_ids, "tags": tags, "entity_labels": e_labels,
               "entity_count": count, "entity_first": e_first,
               "entity_end": tf.where(valid, e_last + 1, -1)}
        if "starts" not in pieces:
            return out
        starts, ends = pieces["starts"], pieces["ends"]
        start_char = tf.where(valid, tf.gather(starts, tf.maximum(e_first, 0), batch_dims=1), -1)
        end_char = tf.where(valid, tf.gather(ends, tf.maximum(e_last, 0), batch_dims=1), -1)
        out.update({"token_starts": starts, "token_ends": ends,
                    "entity_starts": start_char, "entity_ends": end_char,
                    "entity_texts": substr(pieces["text"], start_char, end_char)})
        if words and spec.token_separator == "":
            out.update(self._character_words(raw, on_text, starts, ends))
        elif words:
            num = tf.maximum(tf.reduce_max(tf.concat([num_words, [0]], 0)), 0)  # Wd
            keep = is_word[:, :num]
            out.update({
                "word_count": num_words,
                "word_tags": tf.where(keep, tf.gather(self.module.label_names, tf.maximum(
                    word_tag[:, :num], 0)), ""),
                "word_starts": tf.where(keep, tf.gather(starts, first[:, :num], batch_dims=1),
                                        -1),
                "word_ends": tf.where(keep, tf.gather(ends, last[:, :num], batch_dims=1), -1)})
        return out

    def _character_words(self, raw: tf.Tensor, on_text: tf.Tensor, starts: tf.Tensor,
                         ends: tf.Tensor) -> dict[str, tf.Tensor]:
        """Word outputs of a character-level model: one word per character of each piece, a
        piece's tag spread over its characters as one entity (tfbert.data.tags.spread)."""
        count = tf.where(on_text, ends - starts, 0)  # [B, N] characters of each piece
        flat_count = tf.reshape(count, [-1])
        flat_piece = tf.repeat(tf.range(tf.size(flat_count)), flat_count)  # [K] (all rows)
        offset = tf.ragged.range(flat_count).flat_values  # [K]: 0 .. count - 1 in the piece
        size = tf.gather(flat_count, flat_piece)
        tag = tf.gather(tf.reshape(raw, [-1]), flat_piece)
        variant = tf.where(size == 1, tag, tf.where(
            offset == 0, tf.gather(self._spread_tags[0], tag),
            tf.where(offset == size - 1, tf.gather(self._spread_tags[2], tag),
                     tf.gather(self._spread_tags[1], tag))))
        char = tf.gather(tf.reshape(starts, [-1]), flat_piece) + offset
        per_row = tf.reduce_sum(count, axis=1)  # [B]
        dense = lambda x, fill: tf.RaggedTensor.from_row_lengths(
            x, per_row, validate=False).to_tensor(default_value=fill)  # [B, Wd]
        return {"word_count": per_row,
                "word_tags": dense(tf.gather(self.module.label_names, variant), ""),
                "word_starts": dense(char, -1), "word_ends": dense(char + 1, -1)}

    @classmethod
    def tflite_outputs(cls, model: Any, spec: Any, inputs: dict[str, tf.Tensor], outputs: Any,
                       continuation: tf.Tensor) -> dict[str, tf.Tensor]:
        logits = tf.cast(outputs, tf.float32)
        crf = getattr(model, "crf", None)
        if crf is None:
            return {"logits": logits,
                    "tag_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}
        return {"logits": logits, "tag_ids": _crf_tags(crf, spec, inputs, logits,
                                                       continuation)}


def _crf_tags(crf: Any, spec: Any, inputs: dict[str, tf.Tensor], logits: tf.Tensor,
              continuation: tf.Tensor) -> tf.Tensor:
    """A CRF model's Viterbi tags [B, T] from ids alone (the SavedModel's rule for serve_ids:
    each word's first piece by the "##" rule, or every piece for a character-level model or
    label_alignment "all"), -1 off the chain."""
    t = spec.seq_length
    length = tf.reduce_sum(tf.cast(inputs["input_mask"], tf.int32), axis=1) - 2  # [B]
    pos = tf.range(t)[tf.newaxis, :]
    chain = (pos >= 1) & (pos <= length[:, None])  # [B, T]
    if spec.label_alignment == "first" and spec.token_separator != "":
        chain &= ~tf.gather(continuation, inputs["input_ids"])
    return tf.cast(crf(logits, chain), tf.int32)


def chunk_starts(prefix: tf.Tensor, kind: tf.Tensor) -> tf.Tensor:
    """conlleval's start-of-chunk rule over word tags [B, W] (prefix 0=O 1=B 2=I 3=E 4=S)."""
    prev_prefix = tf.pad(prefix[:, :-1], [[0, 0], [1, 0]])
    prev_kind = tf.pad(kind[:, :-1], [[0, 0], [1, 0]])
    begins = (prefix == 1) | (prefix == 4)
    after_closed = ((prev_prefix == 0) | (prev_prefix == 3) | (prev_prefix == 4)) & (
        (prefix == 2) | (prefix == 3))
    new_kind = (prefix > 0) & tf.not_equal(prev_kind, kind)
    return begins | after_closed | new_kind


HEAD = NerHead
