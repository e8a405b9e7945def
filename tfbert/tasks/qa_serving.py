"""The extractive QA head's export: the best answer span of the context, as run_qa reads it.

Shape legend: B = batch, T = max_seq_length. `text` is the question and `text_b` the context.
serving_default and serve_ids return start_logits/end_logits [B, T], score [B] float32 (start +
end logit of the answer; the null score start_logits[0] + end_logits[0] when there is none),
answer_token_start/answer_token_end [B] int32 (packed positions, inclusive, -1 when no answer),
and serving_default: answer_text [B] string, answer_start/answer_end [B] int32 (characters of
`text_b`, end exclusive, -1 when no answer).

The best span (tfbert/evaluation/spans.py, the search training's decoding uses) among the
`n_best_size` best start and end positions that lie in the context, end >= start, at most
`max_answer_length` pieces (google-research/bert's run_squad.py). The question is cut to
`max_query_length` pieces; with ExportSpec.doc_stride the text signature reads a long context
in windows as training does (tfbert/tasks/serving_windows.py: one every doc_stride pieces, a start
only where its piece has the most context, the best span over the windows, the null score the
smallest over them; start_logits/end_logits, score and answer_token_start/end are then those of
the window the answer comes from); serve_ids scores each given window alone. SQuAD v2.0 models
answer "" when null score - best score > `null_score_diff_threshold`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfbert.evaluation.spans import best_span
from tfbert.tasks import serving_windows as windows
from tfbert.tasks.serving_base import ServingHead
from tfbert.tasks.serving_ops import pad_positions, ragged_head, segment_lengths, substr


class QaHead(ServingHead):
    name = "qa"
    text_b = "always"
    min_seq_length = 4
    question_first = True  # a pair is cut question first (tflite_text.py)
    metadata_keys = ("max_query_length", "max_answer_length", "n_best_size",
                     "version_2_with_negative", "null_score_diff_threshold", "doc_stride")

    def model_outputs(self, outputs: Any, seq_length: int) -> dict[str, tf.Tensor]:
        return {k: pad_positions(tf.cast(outputs[k], tf.float32), seq_length)
                for k in ("start_logits", "end_logits")}

    def window_shapes(self) -> dict[str, list[int | None]]:
        t = self.spec.seq_length
        return {"start_logits": [None, t], "end_logits": [None, t]}

    def pack_pair(self, a: tuple, b: tuple) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        """As in training: the question cut to max_query_length pieces and the context read in
        windows of what fits after it (the first one without doc_stride)."""
        spec, module = self.spec, self.module
        ids_a, starts_a, ends_a = a
        ids_b, starts_b, ends_b = b
        keep_a = tf.minimum(ids_a.row_lengths(), spec.max_query_length)  # [B]
        if spec.doc_stride is not None:  # (training needs room for a context piece)
            keep_a = tf.minimum(keep_a, spec.seq_length - 4)
        ids_a, starts_a, ends_a = (ragged_head(x, keep_a) for x in (ids_a, starts_a, ends_a))
        keep_b = tf.maximum(spec.seq_length - 3 - keep_a, 0)
        if spec.doc_stride is None:
            ids_b, starts_b, ends_b = (ragged_head(x, keep_b) for x in (ids_b, starts_b, ends_b))
            packed = module.packer((ids_a, ids_b))
            return packed, module.char_spans(packed, (starts_a, ends_a), (starts_b, ends_b))
        lengths = ids_b.row_lengths()  # [B]
        row, start, length = windows.window_spans(lengths, keep_b, spec.doc_stride)  # [W]
        ids_b, starts_b, ends_b = (windows.take(x, row, start, length)
                                   for x in (ids_b, starts_b, ends_b))  # [W, (L)]
        ids_a, starts_a, ends_a = (tf.gather(x, row) for x in (ids_a, starts_a, ends_a))
        packed = module.packer((ids_a, ids_b))  # [W, T]
        chars = module.char_spans(packed, (starts_a, ends_a), (starts_b, ends_b))
        # Position j of window w holds context piece start[w] + j - (question + 2); an answer
        # may start there only in the window where that piece has the most context
        # (tfbert.data.windows.is_max_context).
        owner = windows.max_context(row, start, length, lengths)  # [B, P]
        owner = tf.pad(owner, [[0, 0], [0, 1]], constant_values=-1)  # [B, P + 1]
        offset = tf.cast(tf.gather(keep_a, row), tf.int32) + 2  # [W]
        piece = tf.range(spec.seq_length)[tf.newaxis, :] - offset[:, None]  # [W, T]
        inside = (piece >= 0) & (piece < length[:, None])
        piece = tf.clip_by_value(start[:, None] + piece, 0, tf.shape(owner)[1] - 1)
        owner_row = tf.broadcast_to(row[:, None], tf.shape(piece))  # [W, T]
        owners = tf.gather_nd(owner, tf.stack([owner_row, piece], -1))  # [W, T]
        window = tf.range(tf.size(row))[:, tf.newaxis]  # [W, 1]
        chars.update({"window_row": row, "max_context": inside & (owners == window)})
        return packed, chars

    def decode(self, inputs: dict[str, tf.Tensor] | None, outputs: dict[str, tf.Tensor],
               chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        spec = self.spec
        t = spec.seq_length
        start_logits, end_logits = outputs["start_logits"], outputs["end_logits"]  # [W, T]
        la, lb = segment_lengths(inputs)
        pos = tf.range(t)[tf.newaxis, :]
        in_context = (pos >= la[:, None] + 2) & (pos <= (la + lb)[:, None] + 1)  # [W, T]
        windowed = chars is not None and "window_row" in chars
        best_start, best_end, best_score, answered = best_span(
            start_logits, end_logits, chars["max_context"] if windowed else in_context,
            in_context, spec.n_best_size, spec.max_answer_length)  # [W] each
        null_score = start_logits[:, 0] + end_logits[:, 0]  # [W]
        null_window = span_window = None
        if windowed:
            # Google's write_predictions over an example's windows: the best span of any
            # window and the smallest null score, ties to the earlier window. Rows [B] from here.
            row = chars["window_row"]  # [W]
            batch = tf.shape(chars["text_b"])[0]
            window = tf.range(tf.size(row))
            none = tf.size(row)

            def first(hit: tf.Tensor) -> tf.Tensor:  # [W] bool -> [B]: first window of the row
                return tf.math.unsorted_segment_min(tf.where(hit, window, none), row, batch)

            span_score = tf.where(answered, best_score, -float("inf"))
            top = tf.math.unsorted_segment_max(span_score, row, batch)  # [B]
            span_window = first(answered & tf.equal(span_score, tf.gather(top, row)))
            low = tf.math.unsorted_segment_min(null_score, row, batch)  # [B]
            null_window = first(tf.equal(null_score, tf.gather(low, row)))
            answered = span_window < none
            span_window = tf.minimum(span_window, none - 1)
            best_start, best_end, best_score = (tf.gather(x, span_window)
                                                for x in (best_start, best_end, best_score))
            null_score = tf.gather(null_score, null_window)
        if spec.version_2_with_negative:
            answered &= ~(null_score - best_score > spec.null_score_diff_threshold)
        if windowed:  # per row: the window the answer (or the null answer) comes from
            chosen = tf.where(answered, span_window, null_window)  # [B]
            start_logits, end_logits = tf.gather(start_logits, chosen), tf.gather(end_logits,
                                                                                 chosen)
            chars = {**chars, "starts": tf.gather(chars["starts"], chosen),
                     "ends": tf.gather(chars["ends"], chosen)}  # [B, T]
        s_pos = tf.where(answered, best_start, -1)
        e_pos = tf.where(answered, best_end, -1)
        out = {"start_logits": start_logits, "end_logits": end_logits,
               "score": tf.where(answered, best_score, null_score),
               "answer_token_start": s_pos, "answer_token_end": e_pos}
        if chars is None:
            return out
        a_start = tf.where(answered, tf.gather(chars["starts"], tf.maximum(s_pos, 0),
                                               batch_dims=1), -1)
        a_end = tf.where(answered, tf.gather(chars["ends"], tf.maximum(e_pos, 0),
                                             batch_dims=1), -1)
        out.update({"answer_start": a_start, "answer_end": a_end,
                    "answer_text": substr(chars["text_b"], a_start, a_end)})
        return out

    @classmethod
    def tflite_outputs(cls, model: Any, spec: Any, inputs: dict[str, tf.Tensor], outputs: Any,
                       continuation: tf.Tensor) -> dict[str, tf.Tensor]:
        return {k: tf.cast(outputs[k], tf.float32) for k in ("start_logits", "end_logits")}


HEAD = QaHead
