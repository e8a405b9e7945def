"""SavedModel export for TF Serving: raw text in (tokenizer and packer in the graph), task outputs.

Shape legend: B = batch (dynamic), T = max_seq_length, C = classes/tags, H = hidden size,
E = entities in the batch's busiest row (dynamic, >= 0).

Signatures (every output has batch as its first dimension, as TF Serving's row format needs):

  serving_default  inputs  `text` tf.string [B] (and `text_b` tf.string [B] for pair tasks;
                           for QA `text` is the question and `text_b` the context)
  serve_ids        inputs  `input_ids`, `input_mask`, `segment_ids` int32 [B, T]

  classification   logits [B, C] float32, probabilities [B, C] float32, label_ids [B] int32,
                   labels [B] string (label names); a multi-label model (ExportSpec.multi_label)
                   instead: logits [B, C], probabilities [B, C] (sigmoid), thresholds [B, C]
                   (the stored per-label thresholds), label_mask [B, C] int32 (1 where
                   probability >= threshold: the predicted label set), labels [B, C] string
                   (the label's name where predicted, "" elsewhere)
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

Long texts (ExportSpec.long_input "windows", from a model trained that way: tfbert.json
"long_input"/"doc_stride"): `serving_default` reads every text whole, as overlapping windows
of T - 2 pieces `doc_stride` apart (tfbert/export/windows.py; pairs: see `_serve_windows`), the
batch's windows run through the model ExportSpec.window_batch at a time (memory linear in the
text; the request's characters are capped by ExportSpec.max_request_chars), and
  classification   the same outputs, from the mean of each text's windows' logits;
  ner              per piece of the whole text instead of per packed position, P = pieces of
                   the batch's longest text (dynamic, >= 0): logits [B, P, C] (each piece's
                   from the window where it has the most context, 0 past the text),
                   tag_ids [B, P] (-1 past the text), tags [B, P], token_starts/token_ends
                   [B, P] (characters of each piece, -1 past the text); the entity outputs
                   [B, E] as above, offsets into the full text; and word-level outputs,
                   Wd = words of the batch's wordiest text: word_count [B], word_tags [B, Wd]
                   string, word_starts/word_ends [B, Wd] int32 (characters, end exclusive;
                   "" / -1 past a text's words). Words are the model's tokens: whitespace-
                   separated words (token_separator " "), or characters ("": a piece covering
                   several characters spreads its tag over them, B-X I-X ..., as training's
                   decode does).
  serve_ids (and TFLite) take the windows from the caller, one per row, and answer per window;
  tfbert/export/window_inputs.py makes the windows and merges their outputs by the same rules.
A CRF model (BertTokenClassifier(crf=True)) picks NER tags by Viterbi over the pieces it chains
(each word's first piece, or every piece with label_alignment "all"), over the whole text in the
windowed path; the other pieces take their word's tag.

Decoding follows training: NER takes each word's tag from its first word piece (as the
fine-tuning labels were placed), and reads entities with conlleval's BIO/BIOES chunk rules;
QA picks the best span (tfbert/evaluation/spans.py, the search training's decoding uses) among
the `n_best_size` best start and end positions that lie in the context, end >= start, at most
`max_answer_length` pieces (Google's run_squad.py); with ExportSpec.doc_stride the text signature
reads a long context in windows as training does (tfbert/export/windows.py: one every doc_stride
pieces, a start only where its piece has the most context, the best span over the windows, the
null score the smallest over them; start_logits/end_logits, score and answer_token_start/end are
then those of the window the answer comes from); serve_ids scores each given window alone.
SQuAD v2.0 models answer "" when null score - best score > `null_score_diff_threshold`.
Texts longer than T are cut as in training (classification: longest segment first; NER: the
first T - 2 pieces; QA: the question to `max_query_length` pieces, the context to the first
window unless doc_stride is set). Strings that are not valid UTF-8 are decoded with U+FFFD
replacement first, so offsets and answer texts always refer to that (valid) string.
The model runs only up to the batch's last attended position, rounded up to a multiple of 16
(ExportSpec.trim_padding, on by default): per-position outputs read 0 past it.

Both signatures check their inputs in the graph before anything else runs (TF Serving passes
tensors of any shape through to the graph, and answers a failed check with INVALID_ARGUMENT and
its message): `text` / `text_b` rank 1 (read from the shape fed: `fed_shape`), as many of
each, at most max_request_chars characters in all; input_ids in [0, vocab_size),
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
from tfbert.export import windows
from tfbert.export.layout import EXPORT_RECORD, version_folder, write_version
from tfbert.export.streams import split_streams, streamed
from tfbert.fileio import write_json
from tfbert.tasks.registry import EXPORT_HEADS as TASKS

logger = logging.getLogger(__name__)

ID_INPUTS = ("input_ids", "input_mask", "segment_ids")
# The default request limit: 1,000,000 characters (about 3 MB of Chinese UTF-8), and the
# windows per model run; docs/serving.md, "Request size", has what they cost.
MAX_REQUEST_CHARS = 1_000_000
WINDOW_BATCH = 64
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
        multi_label: bool. Classification with independent labels (sigmoid outputs).
        thresholds: list of float. Multi-label: one decision threshold per label (a label is
            predicted when its probability >= its threshold), as tuned on dev.
        long_input: str. Classification and NER text longer than T: "truncate" (cut as in
            training's truncation) or "windows": `serving_default` reads it as overlapping
            windows `doc_stride` pieces apart (see "Long texts" above).
        doc_stride: int or None. Pieces between window starts, as in training. QA: a long
            context is read in windows one every doc_stride pieces (None: the first window
            only). Classification and NER with long_input "windows": in [1, T - 2), default
            T // 2.
        token_separator: str or None. NER words, as training's tokens were: " " a word is a
            run of pieces with no gap between them (whitespace-split words; `serve_ids`, which
            has no text, uses the "##" rule), "" every piece (one character each for Chinese),
            None a piece and its "##" continuations.
        label_alignment: str. NER with a CRF: which pieces its Viterbi chains, "first" (each
            word's first piece, as trained with labels on first pieces) or "all" (every piece).
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
        max_request_chars: int. The most characters of text (`text` and `text_b`, summed
            over the batch) one `serving_default` request may hold; a larger one is refused
            in the graph before it is tokenized ("text holds 1000001 characters in all, over
            the limit of this model (max_request_chars 1000000) ..."). A request's memory grows
            linearly with its text (docs/serving.md, "Request size"), so this bounds what one
            request can take. 0: no limit.
        window_batch: int. Windows the model reads per run in the windowed text path
            (long_input "windows", QA with doc_stride): a long text's windows run in
            chunks of this many, one chunk at a time, so the model's activations stay those
            of one chunk whatever the text's length.
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
    multi_label: bool = False
    thresholds: list[float] | None = None
    long_input: str = "truncate"
    doc_stride: int | None = None
    token_separator: str | None = None
    label_alignment: str = "first"
    jit_compile: bool = False
    trim_padding: bool = True
    cpu_streams: int = 1
    max_request_chars: int = MAX_REQUEST_CHARS
    window_batch: int = WINDOW_BATCH

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise UserError(f"saved_model.py: task {self.task!r} is not one of {TASKS}")
        if (isinstance(self.cpu_streams, bool) or not isinstance(self.cpu_streams, int)
                or self.cpu_streams < 1):
            raise UserError(f"saved_model.py: cpu_streams must be a positive int, "
                            f"got {self.cpu_streams!r}")
        for name, least in (("max_request_chars", 0), ("window_batch", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise UserError(f"saved_model.py: {name} must be an int >= {least}, "
                                f"got {value!r}")
        if self.seq_length < 3 or (self.task == "qa" and self.seq_length < 4):
            raise UserError(f"saved_model.py: max_seq_length {self.seq_length} is too short "
                            f"for task {self.task!r}")
        if self.task in ("classification", "ner") and not self.labels:
            raise UserError(f"saved_model.py: task {self.task!r} needs its label names")
        if self.multi_label and (self.task != "classification" or self.thresholds is None
                                 or len(self.thresholds) != len(self.labels)):
            raise UserError(f"saved_model.py: multi_label is a classification setting with one "
                            f"threshold per label; got task {self.task!r}, "
                            f"{len(self.labels or [])} labels and thresholds {self.thresholds}")
        if self.long_input not in ("truncate", "windows"):
            raise UserError(f"saved_model.py: long_input {self.long_input!r} is not 'truncate' "
                            "or 'windows'")
        if self.long_input == "windows":
            stride = self.window_stride
            if self.task not in ("classification", "ner"):
                raise UserError(f"saved_model.py: long_input 'windows' is for classification "
                                f"and NER, not {self.task!r}")
            if not 1 <= stride < self.seq_length - 2:
                raise UserError(f"saved_model.py: doc_stride {stride} must be in [1, "
                                f"{self.seq_length - 2}) (max_seq_length - 2): a window stride "
                                ">= the window body leaves no overlap")
        if self.token_separator not in (None, "", " "):
            raise UserError(f"saved_model.py: token_separator {self.token_separator!r} is not "
                            "' ', '' or None")
        if self.label_alignment not in ("first", "all"):
            raise UserError(f"saved_model.py: label_alignment {self.label_alignment!r} is not "
                            "'first' or 'all'")
        if self.task == "ner":
            for tag in self.labels:
                prefix, _, kind = tag.partition("-")
                if tag != "O" and (prefix not in _TAG_PREFIXES or prefix == "O" or not kind):
                    raise UserError(f"saved_model.py: NER tag {tag!r} is not 'O' or B/I/E/S-TYPE")

    @property
    def window_stride(self) -> int:
        """Pieces between window starts: doc_stride, or T // 2."""
        return self.seq_length // 2 if self.doc_stride is None else int(self.doc_stride)

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
        self._objects.crf = getattr(model, "crf", None) if spec.task == "ner" else None
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
            # Tag ids of a piece's first / middle / last character when one piece holds several
            # (B-X: B I I, S-X: B I E, E-X: I I E); the tag itself where the label set lacks one.
            index = {name: i for i, name in enumerate(labels)}
            self._spread_tags = [tf.constant([index.get(_spread_tag(t, part), i)
                                              for i, t in enumerate(labels)], tf.int32)
                                 for part in range(3)]  # 3 x [C]

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
        strings = enforce(strings, text_input_checks(text_b is not None,
                                                     self._spec.max_request_chars))
        text, text_b = strings["text"], strings.get("text_b")
        text = _valid_utf8(text)
        text_b = None if text_b is None else _valid_utf8(text_b)
        if self._spec.long_input == "windows":
            return self._serve_windows(text, text_b)
        inputs, chars = self._preprocess(text, text_b)
        chars.update({"text": text, "text_b": text if text_b is None else text_b})
        run = self._run_windows if "window_row" in chars else self._run_model
        return self._decode(inputs, run(inputs), chars=chars)

    def _serve_windows(self, text: tf.Tensor, text_b: tf.Tensor | None
                       ) -> dict[str, tf.Tensor]:
        """serving_default with long_input "windows": every text read whole, as windows.

        Single texts: windows of T - 2 pieces, each packed `[CLS] w [SEP]`. Pairs: when
        len(a) + len(b) <= T - 3 one window, packed as usual; else a' = the first
        max(T - 3 - len(b), (T - 3) // 2) pieces of a, and windows of T - 3 - len(a') pieces over
        b, each packed `[CLS] a' [SEP] w [SEP]`. The windows of the whole batch W run in chunks
        of window_batch (`_run_windows`); classification averages each text's windows' logits,
        NER reads each piece from the window where it has the most context.
        """
        spec, t = self._spec, self._spec.seq_length
        stride = spec.window_stride
        tokenizer = self._objects.tokenizer
        if text_b is None:
            ids, starts, ends = tokenizer.tokenize_with_offsets(text)  # [B, (P)]
            lengths = tf.cast(ids.row_lengths(), tf.int32)  # [B]
            row, start, length = windows.window_spans(lengths, t - 2, stride)  # [W]
            inputs = self._objects.packer(windows.take(ids, row, start, length))  # [W, T]
        else:  # classification pairs (NER and windows take one text)
            batch = tf.shape(text, out_type=tf.int64)[0]
            both = tokenizer.tokenize_with_offsets(tf.concat([text, text_b], 0))[0]
            ids_a, ids_b = both[:batch], both[batch:]
            la = tf.cast(ids_a.row_lengths(), tf.int32)
            lb = tf.cast(ids_b.row_lengths(), tf.int32)
            keep_a = tf.minimum(la, tf.maximum(t - 3 - lb, (t - 3) // 2))  # [B]
            row, start, length = windows.window_spans(lb, t - 3 - keep_a, stride)
            win_a = tf.gather(_ragged_head(ids_a, keep_a), row)  # [W, (a')]
            inputs = self._objects.packer((win_a, windows.take(ids_b, row, start, length)))
        outputs = self._run_windows(inputs)
        num_rows = tf.shape(text)[0]
        if spec.task == "classification":
            logits = tf.math.unsorted_segment_mean(outputs["logits"], row, num_rows)  # [B, C]
            return self._decode(None, {"logits": logits}, chars=None)
        # NER: piece p of row b from window best[b, p], at packed position 1 + p - start.
        best = windows.max_context(row, start, length, lengths)  # [B, P]
        on_text = best >= 0
        window = tf.maximum(best, 0)
        position = tf.where(on_text, 1 + tf.range(tf.shape(best)[1])[tf.newaxis, :]
                            - tf.gather(start, window), 0)
        logits = tf.gather_nd(outputs["logits"], tf.stack([window, position], -1))  # [B, P, C]
        logits = tf.where(on_text[:, :, tf.newaxis], logits, 0.0)
        pieces = {"ids": _dense(ids, 0), "starts": _dense(starts, -1),
                  "ends": _dense(ends, -1), "on_text": on_text, "text": text}
        return self._ner_outputs(logits, pieces, words=True)

    # --- pieces ----------------------------------------------------------------------------------

    def _run_windows(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """`_run_model` over packed windows [W, T] in chunks of at most spec.window_batch, one
        chunk at a time (a while loop, parallel_iterations 1): the model's activations are one
        chunk's whatever W is; the outputs ([W, C] or [W, T(, C)]) are concatenated."""
        spec = self._spec
        size = spec.window_batch
        t, c = spec.seq_length, len(spec.labels or [])
        shapes = {"classification": {"logits": [None, c]}, "ner": {"logits": [None, t, c]},
                  "qa": {"start_logits": [None, t], "end_logits": [None, t]}}[spec.task]
        count = tf.shape(inputs["input_ids"])[0]  # W
        chunks = (count + size - 1) // size

        def body(i: tf.Tensor, arrays: dict[str, tf.TensorArray]):
            part = {name: x[i * size:(i + 1) * size] for name, x in inputs.items()}
            outputs = self._run_model(part)
            return i + 1, {k: arrays[k].write(i + 1, outputs[k]) for k in arrays}

        # Element 0 is empty, so an empty batch (no chunk) concatenates too.
        arrays = {k: tf.TensorArray(tf.float32, size=chunks + 1, infer_shape=False,
                                    element_shape=tf.TensorShape(shape)).write(
                                        0, tf.zeros([0, *shape[1:]]))
                  for k, shape in shapes.items()}
        _, arrays = tf.while_loop(lambda i, _: i < chunks, body, (tf.constant(0), arrays),
                                  parallel_iterations=1)
        return {k: array.concat() for k, array in arrays.items()}  # [W, ...]

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
            # read in windows of what fits after it (the first one without doc_stride).
            keep_a = tf.minimum(ids_a.row_lengths(), spec.max_query_length)  # [B]
            if spec.doc_stride is not None:  # (training needs room for a context piece)
                keep_a = tf.minimum(keep_a, spec.seq_length - 4)
            ids_a, starts_a, ends_a = (_ragged_head(x, keep_a) for x in (ids_a, starts_a, ends_a))
            keep_b = tf.maximum(spec.seq_length - 3 - keep_a, 0)
            if spec.doc_stride is not None:
                from tfbert.export import windows

                lengths = ids_b.row_lengths()  # [B]
                row, start, length = windows.window_spans(lengths, keep_b, spec.doc_stride)  # [W]
                ids_b, starts_b, ends_b = (windows.take(x, row, start, length)
                                           for x in (ids_b, starts_b, ends_b))  # [W, (L)]
                ids_a, starts_a, ends_a = (tf.gather(x, row) for x in (ids_a, starts_a, ends_a))
                packed = self._objects.packer((ids_a, ids_b))  # [W, T]
                chars = self._char_spans(packed, (starts_a, ends_a), (starts_b, ends_b))
                # Position j of window w holds context piece start[w] + j - (question + 2);
                # an answer may start there only in the window where that piece has the most
                # context (tfbert.data.windows.is_max_context).
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
            if self._spec.multi_label:  # independent labels, each at its threshold
                probabilities = tf.sigmoid(logits)  # [B, C]
                thresholds = tf.broadcast_to(tf.constant(self._spec.thresholds, tf.float32),
                                             tf.shape(logits))  # [B, C]
                chosen = probabilities >= thresholds
                names = tf.broadcast_to(self._label_names, tf.shape(logits))  # [B, C]
                return {"logits": logits, "probabilities": probabilities,
                        "thresholds": thresholds, "label_mask": tf.cast(chosen, tf.int32),
                        "labels": tf.where(chosen, names, "")}
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
        """NER outputs of packed windows [B, T]: the pieces sit at positions 1 .. len(a)."""
        t = self._spec.seq_length
        la, _ = _segment_lengths(inputs)
        pos = tf.range(t)[tf.newaxis, :]  # [1, T]
        pieces = {"ids": inputs["input_ids"], "on_text": (pos >= 1) & (pos <= la[:, None])}
        if chars is not None:
            pieces.update(chars)
        out = self._ner_outputs(logits, pieces, words=False)
        if chars is None:
            out["entity_token_starts"] = out.pop("entity_first")
            out["entity_token_ends"] = out.pop("entity_end")
        else:
            del out["entity_first"], out["entity_end"]
        return out

    def _ner_outputs(self, logits: tf.Tensor, pieces: dict[str, tf.Tensor], words: bool
                     ) -> dict[str, tf.Tensor]:
        """Tags, words and entities from per-position logits [B, N, C].

        pieces: "ids" [B, N] (word piece ids), "on_text" [B, N] (the position holds a piece of
        the text), and with the text, "starts"/"ends" [B, N] (its characters) and "text" [B].
        A word is a piece plus the pieces that continue it (ExportSpec.token_separator); its
        tag is its first piece's (softmax argmax, or the CRF's Viterbi path over the chained
        pieces). With `words`, also the word-level outputs.
        """
        spec = self._spec
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
            word_start = on_text & ~tf.gather(self._continuation, pieces["ids"])
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
        crf = self._objects.crf
        if crf is None:
            raw = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B, N]
        else:  # Viterbi over the chained pieces; the other pieces take their word's tag
            chain = word_start if spec.label_alignment == "first" else on_text
            path = tf.cast(crf(logits, chain), tf.int32)  # [B, N], -1 off the chain
            word_tag = tf.gather(path, tf.gather(first, tf.maximum(word_of_pos, 0),
                                                 batch_dims=1), batch_dims=1)
            raw = tf.maximum(tf.where(chain, path, word_tag), 0)
        tag_ids = tf.where(on_text, raw, -1)
        tags = tf.where(on_text, tf.gather(self._label_names, raw), "")
        word_tag = tf.where(is_word, tf.gather(raw, first, batch_dims=1), -1)  # [B, W]
        prefix = tf.where(is_word, tf.gather(self._tag_prefix, tf.maximum(word_tag, 0)), 0)
        kind = tf.where(is_word, tf.gather(self._tag_kind, tf.maximum(word_tag, 0)), 0)
        starts_chunk = _chunk_starts(prefix, kind)  # [B, W]
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
                    "entity_texts": _substr(pieces["text"], start_char, end_char)})
        if words and spec.token_separator == "":
            out.update(self._character_words(raw, on_text, starts, ends))
        elif words:
            num = tf.maximum(tf.reduce_max(tf.concat([num_words, [0]], 0)), 0)  # Wd
            keep = is_word[:, :num]
            out.update({
                "word_count": num_words,
                "word_tags": tf.where(keep, tf.gather(self._label_names, tf.maximum(
                    word_tag[:, :num], 0)), ""),
                "word_starts": tf.where(keep, tf.gather(starts, first[:, :num], batch_dims=1),
                                        -1),
                "word_ends": tf.where(keep, tf.gather(ends, last[:, :num], batch_dims=1), -1)})
        return out

    def _character_words(self, raw: tf.Tensor, on_text: tf.Tensor, starts: tf.Tensor,
                         ends: tf.Tensor) -> dict[str, tf.Tensor]:
        """Word outputs of a character-level model: one word per character of each piece, a
        piece's tag spread over its characters as one entity (tfbert.data.ner._spread)."""
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
                "word_tags": dense(tf.gather(self._label_names, variant), ""),
                "word_starts": dense(char, -1), "word_ends": dense(char + 1, -1)}

    def _decode_qa(self, inputs: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor],
                   chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        spec = self._spec
        t = spec.seq_length
        start_logits, end_logits = outputs["start_logits"], outputs["end_logits"]  # [W, T]
        la, lb = _segment_lengths(inputs)
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
                    "answer_text": _substr(chars["text_b"], a_start, a_end)})
        return out


# --- input checks ----------------------------------------------------------------------------

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


def id_ranges(model: Any, spec: ExportSpec) -> dict[str, int]:
    """{input: n}: serve_ids' inputs take values in [0, n)."""
    config = (model if spec.task == "encoder" else model.encoder).config
    return {"input_ids": config.vocab_size, "segment_ids": config.type_vocab_size,
            "input_mask": 2}


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


def _spread_tag(tag: str, part: int) -> str:
    """The tag of the first (part 0), a middle (1) or the last (2) of several characters one
    piece tagged `tag` covers."""
    prefix, _, kind = tag.partition("-")
    if tag == "O":
        return tag
    new = [{"B": "B", "I": "I", "E": "I", "S": "B"}, {"B": "I", "I": "I", "E": "I", "S": "I"},
           {"B": "I", "I": "I", "E": "E", "S": "E"}][part][prefix]
    return f"{new}-{kind}"


def _dense(values: tf.RaggedTensor, default: int) -> tf.Tensor:
    """A ragged int [B, (P)] as int32 [B, P] (P = the longest row), `default` past each row."""
    return tf.cast(values.to_tensor(default_value=default), tf.int32)


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
    """text[b][start[b, ...]:end[b, ...]] in Unicode characters; "" where start < 0.

    The texts (valid UTF-8) are decoded to code points once and each substring encoded from
    its own: time and memory grow with the texts and the substrings (tf.strings.substr over
    the text broadcast to start's shape copies the whole text for every substring).
    """
    chars = tf.strings.unicode_decode(text, "UTF-8")  # [B, (N)] code points
    shape = tf.shape(start)
    rank = start.shape.rank
    row = tf.reshape(tf.range(tf.shape(text)[0]), tf.concat([[-1], tf.ones([rank - 1],
                                                                             tf.int32)], 0))
    row = tf.reshape(tf.broadcast_to(row, shape), [-1])  # [K]: the text of each substring
    size = tf.cast(tf.gather(chars.row_lengths(), row), tf.int32)
    first = tf.clip_by_value(tf.reshape(start, [-1]), 0, size)
    last = tf.where(tf.reshape(start, [-1]) >= 0,
                    tf.clip_by_value(tf.reshape(end, [-1]), first, size), first)
    offset = tf.cast(tf.gather(chars.row_starts(), row), tf.int32)
    points = tf.gather(chars.flat_values, tf.ragged.range(offset + first, offset + last))
    return tf.reshape(tf.strings.unicode_encode(points, "UTF-8"), shape)


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
