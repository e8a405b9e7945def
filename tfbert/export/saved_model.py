"""SavedModel export for TF Serving: raw text in (tokenizer and packer in the graph), task outputs.

Shape legend: B = batch (dynamic), T = max_seq_length, C = classes/tags, H = hidden size,
E = entities in the batch's busiest row (dynamic, >= 0).

Signatures (every output has batch as its first dimension, as TF Serving's row format needs):

  serving_default  inputs  `text` tf.string [B] (and `text_b` tf.string [B] for pair tasks;
                           for QA `text` is the question and `text_b` the context)
  serve_ids        inputs  `input_ids`, `input_mask`, `segment_ids` int32 [B, T]

  classification   logits [B, C] float32, probabilities [B, C] float32, label_ids [B] int32,
                   labels [B] string (label names)
  ner              logits [B, T, C], tag_ids [B, T] int32 (-1 off the text: [CLS], [SEP],
                   padding), tags [B, T] string ("" off the text), entity_labels [B, E] string,
                   entity_count [B] int32, and
                     serving_default: token_starts/token_ends [B, T] int32 (character span of
                     each word piece, -1 off the text), entity_starts/entity_ends [B, E] int32
                     (characters of `text`, end exclusive), entity_texts [B, E] string;
                     serve_ids: entity_token_starts/entity_token_ends [B, E] int32 (packed
                     positions of the entity's first word piece / one past its last).
                   Padding entities (index >= entity_count) have -1 offsets and "" strings.
  qa               start_logits/end_logits [B, T], score [B] float32 (start + end logit of the
                   answer; the null score start_logits[0] + end_logits[0] when there is none),
                   answer_token_start/answer_token_end [B] int32 (packed positions, inclusive,
                   -1 when no answer), and serving_default: answer_text [B] string,
                   answer_start/answer_end [B] int32 (characters of `text_b`, end exclusive,
                   -1 when no answer).
  encoder          pooled_output [B, H], sequence_output [B, T, H], input_mask [B, T] int32.

Decoding follows training: NER takes each word's tag from its first word piece (as the
fine-tuning labels were placed), and reads entities with conlleval's BIO/BIOES chunk rules;
QA picks the best span (tfbert/evaluation/spans.py, the search training's decoding uses) among
the `n_best_size` best start and end positions that lie in the context, end >= start, at most
`max_answer_length` pieces (Google's run_squad.py, one window);
SQuAD v2.0 models answer "" when null score - best score > `null_score_diff_threshold`.
Texts longer than T are cut as in training (classification: longest segment first; NER: the
first T - 2 pieces; QA: the question to `max_query_length` pieces, the context to the first
window). Strings that are not valid UTF-8 are decoded with U+FFFD replacement first, so offsets
and answer texts always refer to that (valid) string.
The model runs only up to the batch's last attended position, rounded up to a multiple of 16
(ExportSpec.trim_padding, on by default): per-position outputs read 0 past it.

Both signatures check their inputs in the graph before anything else runs (TF Serving passes
tensors of any shape through to the graph, and answers a failed check with INVALID_ARGUMENT and
its message): `text` / `text_b` rank 1 and as many of each; input_ids in [0, vocab_size),
segment_ids in [0, type_vocab_size), input_mask 0 or 1, all three of shape [B, T]. A message
names the input and the bad value: "input_ids holds 99999, outside [0, 21128)".
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

import tensorflow as tf

import tfbert
from tfbert.errors import UserError
from tfbert.evaluation.spans import best_span
from tfbert.export.layout import EXPORT_RECORD, version_folder, write_version
from tfbert.export.streams import split_streams, streamed
from tfbert.fileio import write_json
from tfbert.tasks.registry import EXPORT_HEADS as TASKS

logger = logging.getLogger(__name__)

ID_INPUTS = ("input_ids", "input_mask", "segment_ids")
_TAG_PREFIXES = {"O": 0, "B": 1, "I": 2, "E": 3, "S": 4}


@dataclasses.dataclass
class ExportSpec:
    """What a SavedModel export needs to know besides the Keras model.

    Args:
        task: str. "classification", "ner", "qa" or "encoder".
        seq_length: int. T, the model's max_seq_length.
        labels: list of str. Class or tag names in id order (classification, ner).
        pair: bool. Classification on sentence pairs (`text_b` input); QA is always a pair.
        lower_case: bool. Tokenizer lower-casing (the model's vocab flavour).
        max_query_length: int. QA: question pieces kept.
        max_answer_length: int. QA: longest answer, in pieces.
        n_best_size: int. QA: start/end candidates considered (as run_squad).
        version_2_with_negative: bool. QA: may answer "" (SQuAD v2.0).
        null_score_diff_threshold: float. QA v2.0: answer "" when null - best > this.
        jit_compile: bool. XLA-compile the model's forward inside both signatures (the text
            pre- and post-processing stay TF ops). On the 2-core CPU host of bench/NOTES.md
            no faster than the default graph at batch 1 and slower at batch 32; TF Serving's
            CPU server runs an XLA-compiled function only when started with
            `--xla_cpu_compilation_enabled=true`; the serving check warns.
            XLA compiles once per batch size and trimmed length (seconds for bert-base; the
            first request of each new shape waits for it).
        trim_padding: bool. Run the model only up to the batch's last attended position,
            rounded up to a multiple of 16 (at most T): positions past it are padding in every
            row, which no attended position sees, so the results there are unchanged while a
            short request costs a fraction of the full T (bench/NOTES.md). Per-position outputs
            (NER logits, QA start/end logits, encoder sequence_output) read 0 at the positions
            cut off. False runs every request at the full T.
        cpu_streams: int. S > 1 cuts every transformer block's inference work into S streams
            that TensorFlow's inter-op threads run side by side (tfbert/export/streams.py):
            for latency on CPU, served with one intra-op thread and S inter-op threads (TF
            Serving: `--tensorflow_intra_op_parallelism=1
            --tensorflow_inter_op_parallelism=S`; in Python, tf.config.threading before the
            first op). S must divide the heads and the intermediate size; S = the cores
            serving one request is the usual choice. 1 (default): the plain graph.
    """

    task: str
    seq_length: int
    labels: list[str] | None = None
    pair: bool = False
    lower_case: bool = True
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best_size: int = 20
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0
    jit_compile: bool = False
    trim_padding: bool = True
    cpu_streams: int = 1

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise UserError(f"saved_model.py: task {self.task!r} is not one of {TASKS}")
        if (isinstance(self.cpu_streams, bool) or not isinstance(self.cpu_streams, int)
                or self.cpu_streams < 1):
            raise UserError(f"saved_model.py: cpu_streams must be a positive int, "
                            f"got {self.cpu_streams!r}")
        if self.seq_length < 3 or (self.task == "qa" and self.seq_length < 4):
            raise UserError(f"saved_model.py: max_seq_length {self.seq_length} is too short "
                            f"for task {self.task!r}")
        if self.task in ("classification", "ner") and not self.labels:
            raise UserError(f"saved_model.py: task {self.task!r} needs its label names")
        if self.task == "ner":
            for tag in self.labels:
                prefix, _, kind = tag.partition("-")
                if tag != "O" and (prefix not in _TAG_PREFIXES or prefix == "O" or not kind):
                    raise UserError(f"saved_model.py: NER tag {tag!r} is not 'O' or B/I/E/S-TYPE")

    @property
    def has_text_b(self) -> bool:
        return self.task == "qa" or self.pair


class _Untracked:
    """A plain holder: tf.Module does not look inside it for things to save."""

    def __init__(self, **items: Any) -> None:
        self.__dict__.update(items)


class BertServingModule(tf.Module):
    """The exported object: the model's variables, the vocab asset and the two signatures,
    which run tfbert's tokenizer and packer and the Keras model inside the graph.

    Args:
        model: a tfbert task model or BertEncoder (Keras, TF backend).
        vocab_file: str. The vocab (copied into the SavedModel's assets/).
        spec: ExportSpec.
    """

    def __init__(self, model: Any, vocab_file: str, spec: ExportSpec) -> None:
        super().__init__(name="bert_serving")
        # Only the variables, the vocab asset and the signatures are tracked: the Keras model,
        # tokenizer and packer are used by the traced functions but not saved as objects
        # (their graph is in the functions; the tokenizer's tables are constants). Keras 3
        # variables reach the object graph through this list, as keras.export does it, which
        # is also what lets tf.lite find them as variables.
        # With cpu_streams the blocks' kernels are saved cut per stream instead (streams.py).
        if spec.cpu_streams > 1 and spec.jit_compile:
            raise UserError("saved_model.py: cpu_streams > 1 runs TensorFlow's graph on "
                            "inter-op threads; it does not combine with jit_compile")
        blocks = split_streams(model, spec.cpu_streams) if spec.cpu_streams > 1 else []
        replaced = {id(v) for block in blocks for v in block.replaced}
        self._model_variables = [v.value for v in model.variables if id(v) not in replaced]
        self._stream_variables = [v for block in blocks for v in block.variables]
        self.vocab = tf.saved_model.Asset(vocab_file)
        self._objects = _Untracked(model=model, spec=spec,
                                   tokenizer=tfbert.BertTokenizer(vocab_file,
                                                                  lower_case=spec.lower_case))

        def forward(inputs):
            with streamed(blocks):
                return model(inputs, training=False)

        self._objects.forward = tf.function(forward, jit_compile=True) if spec.jit_compile \
            else forward
        self._objects.packer = tfbert.BertPacker.from_tokenizer(self._objects.tokenizer,
                                                                spec.seq_length)
        self._objects.id_ranges = id_ranges(model, spec)
        vocab = self._objects.tokenizer.vocab
        continuation = [t.startswith("##") for t in vocab]  # ids past vocab.txt are no "##"
        continuation += [False] * (self._objects.id_ranges["input_ids"] - len(continuation))
        self._continuation = tf.constant(continuation)  # [V]
        labels = spec.labels or []
        self._label_names = tf.constant(labels or [""], tf.string)
        if spec.task == "ner":
            self._tag_prefix = tf.constant([_TAG_PREFIXES[t.partition("-")[0]] for t in labels],
                                           tf.int32)  # [C]
            kinds = sorted({t.partition("-")[2] for t in labels if t != "O"})
            self._tag_kind = tf.constant(
                [kinds.index(t.partition("-")[2]) + 1 if t != "O" else 0 for t in labels],
                tf.int32)  # [C]
            self._kind_names = tf.constant([""] + kinds, tf.string)

        t = spec.seq_length
        ids_spec = {name: tf.TensorSpec([None, t], tf.int32, name=name) for name in ID_INPUTS}
        self.serve_ids = tf.function(self._serve_ids, input_signature=[ids_spec])
        text_spec = [tf.TensorSpec([None], tf.string, name="text")]
        if spec.has_text_b:
            text_spec.append(tf.TensorSpec([None], tf.string, name="text_b"))
        self.serve_text = tf.function(self._serve_text, input_signature=text_spec)

    @property
    def _spec(self) -> ExportSpec:
        return self._objects.spec

    # --- signatures ------------------------------------------------------------------------------

    def _serve_ids(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        inputs = {name: tf.cast(inputs[name], tf.int32) for name in ID_INPUTS}
        inputs = enforce(inputs, id_input_checks(self._spec.seq_length, self._objects.id_ranges))
        return self._decode(inputs, self._run_model(inputs), chars=None)

    def _serve_text(self, text: tf.Tensor, text_b: tf.Tensor | None = None
                    ) -> dict[str, tf.Tensor]:
        strings = {"text": text} if text_b is None else {"text": text, "text_b": text_b}
        strings = enforce(strings, text_input_checks(text_b is not None))
        text, text_b = strings["text"], strings.get("text_b")
        text = _valid_utf8(text)
        text_b = None if text_b is None else _valid_utf8(text_b)
        inputs, chars = self._preprocess(text, text_b)
        chars.update({"text": text, "text_b": text if text_b is None else text_b})
        return self._decode(inputs, self._run_model(inputs), chars=chars)

    # --- pieces ----------------------------------------------------------------------------------

    def _run_model(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        t = self._spec.seq_length
        if self._spec.trim_padding:  # see ExportSpec.trim_padding
            length = _trimmed_length(inputs["input_mask"], t)
            inputs = {name: x[:, :length] for name, x in inputs.items()}
        outputs = self._objects.forward(inputs)
        task = self._spec.task
        if task == "classification":
            return {"logits": tf.cast(outputs, tf.float32)}
        if task == "ner":
            return {"logits": _pad_positions(tf.cast(outputs, tf.float32), t)}
        if task == "qa":
            return {k: _pad_positions(tf.cast(outputs[k], tf.float32), t)
                    for k in ("start_logits", "end_logits")}
        return {"pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
                "sequence_output": _pad_positions(tf.cast(outputs["sequence_output"],
                                                          tf.float32), t)}

    def _preprocess(self, text: tf.Tensor, text_b: tf.Tensor | None
                    ) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        """Strings -> packed ids [B, T] and, per packed position, the character span [B, T]."""
        spec = self._spec
        if text_b is None:
            ids_a, starts_a, ends_a = self._objects.tokenizer.tokenize_with_offsets(text)
            packed = self._objects.packer(ids_a)  # [B, (P)] -> [B, T]
            return packed, self._char_spans(packed, (starts_a, ends_a), None)
        # One tokenizer call for both segments (half the graph): rows [0, B) are a, [B, 2B) b.
        batch = tf.shape(text, out_type=tf.int64)[0]  # as many as text_b (text_input_checks)
        both = self._objects.tokenizer.tokenize_with_offsets(tf.concat([text, text_b], 0))
        ids_a, starts_a, ends_a = (x[:batch] for x in both)
        ids_b, starts_b, ends_b = (x[batch:] for x in both)
        if spec.task == "qa":
            # As in training: the question is cut to max_query_length pieces and the context
            # to what fits after it (the first window).
            keep_a = tf.minimum(ids_a.row_lengths(), spec.max_query_length)  # [B]
            ids_a, starts_a, ends_a = (_ragged_head(x, keep_a) for x in (ids_a, starts_a, ends_a))
            keep_b = tf.maximum(spec.seq_length - 3 - keep_a, 0)
            ids_b, starts_b, ends_b = (_ragged_head(x, keep_b) for x in (ids_b, starts_b, ends_b))
        packed = self._objects.packer((ids_a, ids_b))
        return packed, self._char_spans(packed, (starts_a, ends_a), (starts_b, ends_b))

    def _char_spans(self, packed: dict[str, tf.Tensor], a: tuple, b: tuple | None
                    ) -> dict[str, tf.Tensor]:
        """Character start/end of the piece at each packed position, -1 elsewhere.

        Packing is `[CLS] a [SEP] (b [SEP])`, cut from the end of each segment, so piece j of
        segment a sits at position 1 + j and piece j of b at len(a) + 2 + j.
        """
        t = self._spec.seq_length
        la, lb = _segment_lengths(packed)  # [B]
        pos = tf.range(t)[tf.newaxis, :]  # [1, T]
        in_a = (pos >= 1) & (pos <= la[:, None])
        idx_a = tf.clip_by_value(pos - 1, 0, t - 1) + tf.zeros_like(la)[:, None]
        start = tf.where(in_a, _take(a[0], idx_a, t), -1)
        end = tf.where(in_a, _take(a[1], idx_a, t), -1)
        if b is not None:
            in_b = (pos >= la[:, None] + 2) & (pos <= (la + lb)[:, None] + 1)
            idx_b = tf.clip_by_value(pos - la[:, None] - 2, 0, t - 1)
            start = tf.where(in_b, _take(b[0], idx_b, t), start)
            end = tf.where(in_b, _take(b[1], idx_b, t), end)
        return {"starts": start, "ends": end}  # int32 [B, T]

    # --- task outputs ----------------------------------------------------------------------------

    def _decode(self, inputs: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor],
                chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        task = self._spec.task
        if task == "classification":
            logits = outputs["logits"]  # [B, C]
            label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B]
            return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                    "label_ids": label_ids, "labels": tf.gather(self._label_names, label_ids)}
        if task == "ner":
            return self._decode_ner(inputs, outputs["logits"], chars)
        if task == "qa":
            return self._decode_qa(inputs, outputs, chars)
        return {**outputs, "input_mask": inputs["input_mask"]}

    def _decode_ner(self, inputs: dict[str, tf.Tensor], logits: tf.Tensor,
                    chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        t = self._spec.seq_length
        la, _ = _segment_lengths(inputs)
        pos = tf.range(t)[tf.newaxis, :]  # [1, T]
        on_text = (pos >= 1) & (pos <= la[:, None])  # [B, T]
        raw = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B, T]
        tag_ids = tf.where(on_text, raw, -1)
        tags = tf.where(on_text, tf.gather(self._label_names, raw), "")
        # A word = a piece that is not a "##" continuation, plus the continuations after it.
        continuation = tf.gather(self._continuation, inputs["input_ids"])  # [B, T]
        word_start = on_text & ~continuation  # [B, T]
        word_of_pos = tf.cumsum(tf.cast(word_start, tf.int32), axis=1) - 1  # [B, T]
        in_word = on_text & (word_of_pos >= 0)
        num_words = tf.reduce_sum(tf.cast(word_start, tf.int32), axis=1)  # [B]
        # Word-level arrays [B, W=T]: tag, first position, one past the last position.
        batch = tf.shape(raw)[0]
        rows = tf.range(batch)[:, None] + tf.zeros_like(pos)  # [B, T]
        seg = tf.where(in_word, rows * t + word_of_pos, batch * t)  # overflow bucket
        n_seg = batch * t + 1
        first = tf.math.unsorted_segment_min(pos + tf.zeros_like(rows), seg, n_seg)[:-1]
        last = tf.math.unsorted_segment_max(pos + tf.zeros_like(rows), seg, n_seg)[:-1]
        first, last = tf.reshape(first, [batch, t]), tf.reshape(last, [batch, t])
        is_word = tf.range(t)[tf.newaxis, :] < num_words[:, None]  # [B, W]
        first = tf.where(is_word, first, 0)
        last = tf.where(is_word, last, 0)
        word_tag = tf.where(is_word, tf.gather(raw, first, batch_dims=1), -1)  # [B, W]
        prefix = tf.where(is_word, tf.gather(self._tag_prefix, tf.maximum(word_tag, 0)), 0)
        kind = tf.where(is_word, tf.gather(self._tag_kind, tf.maximum(word_tag, 0)), 0)
        starts_chunk = _chunk_starts(prefix, kind)  # [B, W]
        chunk = tf.cumsum(tf.cast(starts_chunk, tf.int32), axis=1) - 1  # [B, W]
        count = tf.reduce_sum(tf.cast(starts_chunk, tf.int32), axis=1)  # [B]
        num_entities = tf.maximum(tf.reduce_max(tf.concat([count, [0]], 0)), 0)  # E
        in_entity = (prefix > 0) & (chunk >= 0)
        eseg = tf.where(in_entity, rows * t + chunk, batch * t)
        e_first = tf.reshape(tf.math.unsorted_segment_min(first, eseg, n_seg)[:-1], [batch, t])
        e_last = tf.reshape(tf.math.unsorted_segment_max(last, eseg, n_seg)[:-1], [batch, t])
        e_kind = tf.reshape(tf.math.unsorted_segment_max(kind, eseg, n_seg)[:-1], [batch, t])
        # Keep E columns; padding entities get -1 / "".
        valid = tf.range(num_entities)[tf.newaxis, :] < count[:, None]  # [B, E]
        e_first = tf.where(valid, e_first[:, :num_entities], -1)
        e_last = tf.where(valid, e_last[:, :num_entities], -1)
        e_labels = tf.where(valid, tf.gather(self._kind_names,
                                             tf.maximum(e_kind[:, :num_entities], 0)), "")
        out = {"logits": logits, "tag_ids": tag_ids, "tags": tags, "entity_labels": e_labels,
               "entity_count": count}
        if chars is None:
            out["entity_token_starts"] = e_first
            out["entity_token_ends"] = tf.where(valid, e_last + 1, -1)
            return out
        start_char = tf.where(valid, tf.gather(chars["starts"], tf.maximum(e_first, 0),
                                               batch_dims=1), -1)
        end_char = tf.where(valid, tf.gather(chars["ends"], tf.maximum(e_last, 0),
                                             batch_dims=1), -1)
        out.update({"token_starts": chars["starts"], "token_ends": chars["ends"],
                    "entity_starts": start_char, "entity_ends": end_char,
                    "entity_texts": _substr(chars["text"], start_char, end_char)})
        return out

    def _decode_qa(self, inputs: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor],
                   chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        spec = self._spec
        t = spec.seq_length
        start_logits, end_logits = outputs["start_logits"], outputs["end_logits"]  # [B, T]
        la, lb = _segment_lengths(inputs)
        pos = tf.range(t)[tf.newaxis, :]
        in_context = (pos >= la[:, None] + 2) & (pos <= (la + lb)[:, None] + 1)  # [B, T]
        best_start, best_end, best_score, answered = best_span(
            start_logits, end_logits, in_context, in_context, spec.n_best_size,
            spec.max_answer_length)  # [B] each
        null_score = start_logits[:, 0] + end_logits[:, 0]
        if spec.version_2_with_negative:
            answered &= ~(null_score - best_score > spec.null_score_diff_threshold)
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
                    "answer_text": _substr(chars["text_b"], a_start, a_end)})
        return out


# --- input checks ----------------------------------------------------------------------------

# A check: (holds: bool scalar, message template with {} per value, values). A stage is a
# function from the tensors to its checks; enforce calls each stage on tensors that exist only
# once the previous stage's checks held, so no op of a later stage (a reduction over axes a
# bad shape lacks, say) can run, and fail with TensorFlow's own message, before them.
Check = tuple[tf.Tensor, str, list[tf.Tensor]]
Stage = Callable[[dict[str, tf.Tensor]], list[Check]]


def id_input_checks(seq_length: int, ranges: dict[str, int]) -> list[Stage]:
    """serve_ids' contract in two stages: shapes [B, T] alike, then values in range.

    Args:
        seq_length: int. T.
        ranges: {name: n}: the input's values must lie in [0, n) (vocab_size,
            type_vocab_size, 2 for the mask).

    The stages take {"input_ids", "input_mask", "segment_ids": int32 tensors of any shape}.
    """
    def shapes(inputs: dict[str, tf.Tensor]) -> list[Check]:
        checks = []
        for name in ID_INPUTS:
            shape = tf.shape(inputs[name])
            holds = tf.equal(_rank(inputs[name]), 2) & tf.reduce_all(
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


def id_ranges(model: Any, spec: ExportSpec) -> dict[str, int]:
    """{input: n}: serve_ids' inputs take values in [0, n)."""
    config = (model if spec.task == "encoder" else model.encoder).config
    return {"input_ids": config.vocab_size, "segment_ids": config.type_vocab_size,
            "input_mask": 2}


def text_input_checks(has_text_b: bool) -> list[Stage]:
    """serving_default's contract: `text` (and `text_b`) rank 1, as many of each."""
    def ranks(strings: dict[str, tf.Tensor]) -> list[Check]:
        return [(tf.equal(_rank(x), 1), f"{name} has shape {{}}, expected [B] (one string per "
                 "example)", [tf.shape(x)]) for name, x in strings.items()]

    def counts(strings: dict[str, tf.Tensor]) -> list[Check]:
        a, b = tf.size(strings["text"]), tf.size(strings["text_b"])
        return [(tf.equal(a, b), "text has {} strings and text_b {}: text and text_b must "
                 "have the same number of strings", [a, b])]

    return [ranks, counts] if has_text_b else [ranks]


def _rank(x: tf.Tensor) -> tf.Tensor:
    """The rank of the tensor fed, in the graph (tf.rank would read the signature's static rank,
    which TF Serving does not enforce: it feeds tensors of any shape)."""
    return tf.raw_ops.Rank(input=x)


def enforce(tensors: dict[str, tf.Tensor], stages: list[Stage]) -> dict[str, tf.Tensor]:
    """`tensors`, passed on only after every check held (tf.debugging.Assert, stage by stage);
    a failed check raises InvalidArgumentError "assertion failed: [MESSAGE]"."""
    for stage in stages:
        asserts = [tf.debugging.Assert(holds, [tf.strings.format(message, values)])
                   for holds, message, values in stage(tensors)]
        with tf.control_dependencies(asserts):
            tensors = {name: tf.identity(x) for name, x in tensors.items()}
    return tensors


# --- graph helpers ---------------------------------------------------------------------------


TRIM_MULTIPLE = 16  # trimmed lengths are multiples of this: few distinct shapes to compile


def _trimmed_length(mask: tf.Tensor, t: int) -> tf.Tensor:
    """One past the batch's last attended position (mask != 0), rounded up to a multiple of
    TRIM_MULTIPLE, at least one multiple and at most T: int32 scalar."""
    attended = tf.cast(tf.not_equal(mask, 0), tf.int32)  # [B, T]
    last = tf.reduce_max(attended * tf.range(1, t + 1)[tf.newaxis, :])  # int32 min if B = 0
    rounded = tf.maximum(last + TRIM_MULTIPLE - 1, TRIM_MULTIPLE) // TRIM_MULTIPLE
    return tf.minimum(rounded * TRIM_MULTIPLE, t)


def _pad_positions(x: tf.Tensor, t: int) -> tf.Tensor:
    """[B, L, ...] -> [B, T, ...]: zeros at the positions trim_padding cut off."""
    paddings = [[0, 0], [0, t - tf.shape(x)[1]]] + [[0, 0]] * (x.shape.rank - 2)
    y = tf.pad(x, paddings)
    y.set_shape([x.shape[0], t, *x.shape[2:]])
    return y


def _valid_utf8(text: tf.Tensor) -> tf.Tensor:
    """Invalid UTF-8 byte sequences become U+FFFD (as the tokenizer decodes them)."""
    return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)


def _segment_lengths(inputs: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
    """Pieces of segment a and b in `[CLS] a [SEP] (b [SEP])` packed inputs: int32 [B] each."""
    mask = tf.cast(inputs["input_mask"], tf.int32)
    seg_b = tf.cast(tf.equal(inputs["segment_ids"], 1), tf.int32) * mask
    n_b = tf.reduce_sum(seg_b, axis=1)
    n_a = tf.reduce_sum(mask, axis=1) - n_b
    return tf.maximum(n_a - 2, 0), tf.maximum(n_b - 1, 0)


def _take(values: tf.RaggedTensor, index: tf.Tensor, width: int) -> tf.Tensor:
    """values[b, index[b, j]] for ragged values [B, (P)] and index [B, J] (-1 past a row)."""
    dense = tf.cast(values.to_tensor(default_value=-1, shape=[None, width]), tf.int32)
    return tf.gather(dense, index, batch_dims=1)


def _ragged_head(values: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """The first keep[b] items of each row of a ragged [B, (P)] tensor."""
    starts = values.row_starts()
    keep = tf.minimum(tf.cast(keep, starts.dtype), values.row_lengths())
    index = tf.ragged.range(starts, starts + keep).flat_values
    return tf.RaggedTensor.from_row_lengths(tf.gather(values.flat_values, index), keep,
                                            validate=False)


def _chunk_starts(prefix: tf.Tensor, kind: tf.Tensor) -> tf.Tensor:
    """conlleval's start-of-chunk rule over word tags [B, W] (prefix 0=O 1=B 2=I 3=E 4=S)."""
    prev_prefix = tf.pad(prefix[:, :-1], [[0, 0], [1, 0]])
    prev_kind = tf.pad(kind[:, :-1], [[0, 0], [1, 0]])
    begins = (prefix == 1) | (prefix == 4)
    after_closed = ((prev_prefix == 0) | (prev_prefix == 3) | (prev_prefix == 4)) & (
        (prefix == 2) | (prefix == 3))
    new_kind = (prefix > 0) & tf.not_equal(prev_kind, kind)
    return begins | after_closed | new_kind


def _substr(text: tf.Tensor, start: tf.Tensor, end: tf.Tensor) -> tf.Tensor:
    """text[b][start[b, ...]:end[b, ...]] in Unicode characters; "" where start < 0."""
    ok = start >= 0
    shape = tf.shape(start)
    rank = start.shape.rank
    full = tf.reshape(text, tf.concat([[-1], tf.ones([rank - 1], tf.int32)], 0))
    full = tf.broadcast_to(full, shape)
    return tf.strings.substr(full, tf.where(ok, start, 0), tf.where(ok, end - start, 0),
                             unit="UTF8_CHAR")


# --- export ----------------------------------------------------------------------------------


def signature_summary(signatures: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """{signature: {"inputs": names, "outputs": names}} of concrete functions."""
    return {name: {"inputs": sorted(s.name for s in tf.nest.flatten(f.structured_input_signature)
                                    if s is not None),
                   "outputs": sorted(f.structured_outputs)}
            for name, f in signatures.items()}


def export_saved_model(model: Any, export_dir: str, vocab_file: str, spec: ExportSpec,
                       metadata: dict[str, Any] | None = None, overwrite: bool = False
                       ) -> tuple[BertServingModule, str]:
    """Writes a TF Serving SavedModel with `serving_default` (text in) and `serve_ids`.

    The folder rule (tfbert/export/layout.py): an export_dir named by a number is that version
    folder, written if new or empty, replaced only if it holds a tfbert export and `overwrite`
    is set, an error otherwise; any other export_dir is the model's base folder, and the export
    becomes its next version (highest numeric folder + 1, or 1), an error if the folder holds
    anything but numeric version folders and tflite/. The SavedModel and its
    assets.extra/tfbert_export.json are written into a temp folder beside the version folder
    and renamed into place, so a failure or kill leaves the previous version whole.

    Args:
        model: tfbert task model or BertEncoder.
        export_dir: str. saved_models/NAME/VERSION, or saved_models/NAME for its next version.
        vocab_file: str. vocab.txt of the model (stored as an asset).
        spec: ExportSpec. Task, sequence length, labels, decoding settings.
        metadata: dict or None. Extra facts for assets.extra/tfbert_export.json.
        overwrite: bool. Replace an earlier tfbert export in the version folder.

    Returns:
        (the BertServingModule that was saved, whose tf.functions run the same graph
        in-process; the version folder written).

    Raises:
        UserError: export_dir holds something the rule does not let the export replace
            (checked before anything is built or written).
    """
    version_dir = version_folder(export_dir, overwrite)
    module = BertServingModule(model, vocab_file, spec)
    signatures = {"serving_default": module.serve_text.get_concrete_function(),
                  "serve_ids": module.serve_ids.get_concrete_function()}
    record = {**dataclasses.asdict(spec), **(metadata or {}),
              "signatures": signature_summary(signatures)}

    def write(folder: str) -> None:
        tf.saved_model.save(module, folder, signatures=signatures)
        write_json(os.path.join(folder, EXPORT_RECORD), record)

    write_version(version_dir, write, overwrite)
    logger.info("wrote SavedModel %s (task %s, max_seq_length %d)", version_dir, spec.task,
                spec.seq_length)
    return module, version_dir
