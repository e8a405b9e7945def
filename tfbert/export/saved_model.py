"""SavedModel export for TF Serving: raw text in (tokenizer and packer in the graph), task outputs.

Shape legend: B = batch (dynamic), T = max_seq_length, C = classes/tags, H = hidden size,
E = entities in the batch's busiest row (dynamic, >= 0).

Signatures (every output has batch as its first dimension, as TF Serving's row format needs):

  serving_default  inputs  `text` tf.string [B] (and `text_b` tf.string [B] for pair tasks;
                           for QA `text` is the question and `text_b` the context)
  serve_ids        inputs  `input_ids`, `input_mask`, `segment_ids` int32 [B, T]

  and the task's outputs: its head (tfbert/tasks/*_serving.py) says what each returns and how
  it decodes them in the graph.

Long texts (ExportSpec.long_input "windows", from a model trained that way: tfbert.json
"long_input"/"doc_stride"; the heads with `windows`): `serving_default` reads every text whole,
as overlapping windows of T - 2 pieces `doc_stride` apart (tfbert/tasks/serving_windows.py;
pairs: see `_serve_windows`), the batch's windows run through the model
ExportSpec.window_batch at a time (memory linear in the text; the request's characters are capped by
ExportSpec.max_request_chars), and the head merges each text's windows (`merge_windows`).
serve_ids (and TFLite) take the windows from the caller, one per row, and answer per window;
tfbert/export/window_inputs.py makes the windows and merges their outputs by the same rules.

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

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from tfbert.data.windows import LONG_INPUT
from tfbert.errors import UserError
from tfbert.export import heads
from tfbert.export.input_checks import (
    ID_INPUTS,
    enforce,
    id_input_checks,
    id_ranges,
    text_input_checks,
)
from tfbert.export.layout import EXPORT_RECORD, version_folder, write_version
from tfbert.export.streams import split_streams, streamed
from tfbert.fileio import write_json
from tfbert.tasks import serving_windows as windows
from tfbert.tasks.serving_ops import (
    ragged_head,
    segment_lengths,
    take_positions,
    trimmed_length,
    valid_utf8,
)
from tfbert.text.packer import BertPacker
from tfbert.text.tokenizer import BertTokenizer

logger = logging.getLogger(__name__)

# The default request limit: 1,000,000 characters (about 3 MB of Chinese UTF-8), and the
# windows per model run; docs/serving.md, "Request size", has what they cost.
MAX_REQUEST_CHARS = 1_000_000
WINDOW_BATCH = 64


@dataclasses.dataclass
class ExportSpec:
    """What a SavedModel export needs to know besides the Keras model.

    Args:
        task: str. The serving head (`tfbert.tasks.registry.serving_head`): "classification",
            "ner", "qa" or "encoder".
        seq_length: int. T, the model's max_seq_length.
        labels: list of str. Class or tag names in id order (classification, ner).
        pair: bool. Classification on sentence pairs (`text_b` input); QA is always a pair.
        lower_case: bool. Tokenizer lower-casing (the model's vocab flavour).
        max_query_length: int. QA: question pieces kept.
        max_answer_length: int. QA: longest answer, in pieces.
        n_best_size: int. QA: start/end candidates considered (as run_qa).
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
            pre- and post-processing stay TF ops). On the 2-core CPU host of docs/performance.md
            no faster than the default graph at batch 1 and slower at batch 32; TF Serving's
            CPU server runs an XLA-compiled function only when started with
            `--xla_cpu_compilation_enabled=true`; the serving check warns.
            XLA compiles once per batch size and trimmed length (seconds for bert-base; the
            first request of each new shape waits for it).
        trim_padding: bool. Run the model only up to the batch's last attended position,
            rounded up to a multiple of 16 (at most T): positions past it are padding in every
            row, which no attended position sees, so the results there are unchanged while a
            short request costs a fraction of the full T (docs/performance.md). Per-position outputs
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
        head = heads.get(self.task)
        if (isinstance(self.cpu_streams, bool) or not isinstance(self.cpu_streams, int)
                or self.cpu_streams < 1):
            raise UserError(f"saved_model.py: cpu_streams must be a positive int, "
                            f"got {self.cpu_streams!r}")
        for name, least in (("max_request_chars", 0), ("window_batch", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise UserError(f"saved_model.py: {name} must be an int >= {least}, "
                                f"got {value!r}")
        if self.seq_length < head.min_seq_length:
            raise UserError(f"saved_model.py: max_seq_length {self.seq_length} is too short "
                            f"for task {self.task!r}")
        if head.needs_labels and not self.labels:
            raise UserError(f"saved_model.py: task {self.task!r} needs its label names")
        if self.long_input not in LONG_INPUT:
            raise UserError(f"saved_model.py: long_input {self.long_input!r} is not one of "
                            f"{LONG_INPUT}")
        if self.long_input == "windows":
            stride = self.window_stride
            if not head.windows:
                raise UserError(f"saved_model.py: long_input 'windows' is not served for task "
                                f"{self.task!r}")
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
        head.check_spec(self)

    @property
    def window_stride(self) -> int:
        """Pieces between window starts: doc_stride, or T // 2."""
        return self.seq_length // 2 if self.doc_stride is None else int(self.doc_stride)

    @property
    def head(self) -> type[heads.ServingHead]:
        """The serving head of `task` (`tfbert.tasks.registry.serving_head`)."""
        return heads.get(self.task)

    @property
    def has_text_b(self) -> bool:
        head = self.head
        return head.text_b == "always" or (head.text_b == "pair" and self.pair)


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
                                   tokenizer=BertTokenizer(vocab_file,
                                                                  lower_case=spec.lower_case))

        def forward(inputs):
            with streamed(blocks):
                return model(inputs, training=False)

        self._objects.forward = tf.function(forward, jit_compile=True) if spec.jit_compile \
            else forward
        self._objects.packer = BertPacker.from_tokenizer(self._objects.tokenizer,
                                                                spec.seq_length)
        self._objects.id_ranges = id_ranges(model)
        vocab = self._objects.tokenizer.vocab
        continuation = [t.startswith("##") for t in vocab]  # ids past vocab.txt are no "##"
        continuation += [False] * (self._objects.id_ranges["input_ids"] - len(continuation))
        self._objects.continuation = tf.constant(continuation)  # [V]
        self._objects.label_names = tf.constant(spec.labels or [""], tf.string)
        self._objects.char_spans = self._char_spans
        # The task's part (its head, tfbert/tasks/*_serving.py): it reads the packer,
        # char_spans, label_names and continuation from this untracked holder.
        self._objects.head = spec.head(model, spec, self._objects)

        t = spec.seq_length
        ids_spec = {name: tf.TensorSpec([None, t], tf.int32, name=name) for name in ID_INPUTS}
        self.serve_ids = tf.function(self._serve_ids, input_signature=[ids_spec])
        text_spec = [tf.TensorSpec([None], tf.string, name="text")]
        if spec.has_text_b:
            text_spec.append(tf.TensorSpec([None], tf.string, name="text_b"))
        self.serve_text = tf.function(self._serve_text, input_signature=text_spec)
        # The head's own signatures beside these two (the sentence encoder's similarity).
        self.serve_extra = dict(self._objects.head.extra_signatures(self.serve_text))

    def signatures(self) -> dict[str, Any]:
        """{signature name: concrete function}: serving_default, serve_ids and the head's own."""
        return {"serving_default": self.serve_text.get_concrete_function(),
                "serve_ids": self.serve_ids.get_concrete_function(),
                **{name: f.get_concrete_function() for name, f in self.serve_extra.items()}}

    @property
    def _spec(self) -> ExportSpec:
        return self._objects.spec

    # --- signatures ------------------------------------------------------------------------------

    def _serve_ids(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        inputs = {name: tf.cast(inputs[name], tf.int32) for name in ID_INPUTS}
        inputs = enforce(inputs, id_input_checks(self._spec.seq_length, self._objects.id_ranges))
        return self._objects.head.decode(inputs, self._run_model(inputs), chars=None)

    def _serve_text(self, text: tf.Tensor, text_b: tf.Tensor | None = None
                    ) -> dict[str, tf.Tensor]:
        strings = {"text": text} if text_b is None else {"text": text, "text_b": text_b}
        strings = enforce(strings, text_input_checks(text_b is not None,
                                                     self._spec.max_request_chars))
        text, text_b = strings["text"], strings.get("text_b")
        text = valid_utf8(text)
        text_b = None if text_b is None else valid_utf8(text_b)
        if self._spec.long_input == "windows":
            return self._serve_windows(text, text_b)
        inputs, chars = self._preprocess(text, text_b)
        chars.update({"text": text, "text_b": text if text_b is None else text_b})
        run = self._run_windows if "window_row" in chars else self._run_model
        return self._objects.head.decode(inputs, run(inputs), chars=chars)

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
            win_a = tf.gather(ragged_head(ids_a, keep_a), row)  # [W, (a')]
            inputs = self._objects.packer((win_a, windows.take(ids_b, row, start, length)))
        outputs = self._run_windows(inputs)
        win = {"row": row, "start": start, "length": length, "num_rows": tf.shape(text)[0]}
        if text_b is None:
            win.update(ids=ids, starts=starts, ends=ends, lengths=lengths, text=text)
        return self._objects.head.merge_windows(outputs, win)

    # --- pieces ----------------------------------------------------------------------------------

    def _run_windows(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """`_run_model` over packed windows [W, T] in chunks of at most spec.window_batch, one
        chunk at a time (a while loop, parallel_iterations 1): the model's activations are one
        chunk's whatever W is; the outputs ([W, C] or [W, T(, C)]) are concatenated."""
        spec = self._spec
        size = spec.window_batch
        shapes = self._objects.head.window_shapes()
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
            length = trimmed_length(inputs["input_mask"], t)
            inputs = {name: x[:, :length] for name, x in inputs.items()}
        return self._objects.head.model_outputs(self._objects.forward(inputs), t)

    def _preprocess(self, text: tf.Tensor, text_b: tf.Tensor | None
                    ) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        """Strings -> packed ids [B, T] and, per packed position, the character span [B, T]."""
        if text_b is None:
            ids_a, starts_a, ends_a = self._objects.tokenizer.tokenize_with_offsets(text)
            packed = self._objects.packer(ids_a)  # [B, (P)] -> [B, T]
            return packed, self._char_spans(packed, (starts_a, ends_a), None)
        # One tokenizer call for both segments (half the graph): rows [0, B) are a, [B, 2B) b.
        batch = tf.shape(text, out_type=tf.int64)[0]  # as many as text_b (text_input_checks)
        both = self._objects.tokenizer.tokenize_with_offsets(tf.concat([text, text_b], 0))
        ids_a, starts_a, ends_a = (x[:batch] for x in both)
        ids_b, starts_b, ends_b = (x[batch:] for x in both)
        return self._objects.head.pack_pair((ids_a, starts_a, ends_a), (ids_b, starts_b, ends_b))

    def _char_spans(self, packed: dict[str, tf.Tensor], a: tuple, b: tuple | None
                    ) -> dict[str, tf.Tensor]:
        """Character start/end of the piece at each packed position, -1 elsewhere.

        Packing is `[CLS] a [SEP] (b [SEP])`, cut from the end of each segment, so piece j of
        segment a sits at position 1 + j and piece j of b at len(a) + 2 + j.
        """
        t = self._spec.seq_length
        la, lb = segment_lengths(packed)  # [B]
        pos = tf.range(t)[tf.newaxis, :]  # [1, T]
        in_a = (pos >= 1) & (pos <= la[:, None])
        idx_a = tf.clip_by_value(pos - 1, 0, t - 1) + tf.zeros_like(la)[:, None]
        start = tf.where(in_a, take_positions(a[0], idx_a, t), -1)
        end = tf.where(in_a, take_positions(a[1], idx_a, t), -1)
        if b is not None:
            in_b = (pos >= la[:, None] + 2) & (pos <= (la + lb)[:, None] + 1)
            idx_b = tf.clip_by_value(pos - la[:, None] - 2, 0, t - 1)
            start = tf.where(in_b, take_positions(b[0], idx_b, t), start)
            end = tf.where(in_b, take_positions(b[1], idx_b, t), end)
        return {"starts": start, "ends": end}  # int32 [B, T]


# --- export ----------------------------------------------------------------------------------


def signature_summary(signatures: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """{signature: {"inputs": names, "outputs": names}} of concrete functions."""
    return {name: {"inputs": sorted(s.name for s in tf.nest.flatten(f.structured_input_signature)
                                    if s is not None),
                   "outputs": sorted(f.structured_outputs)}
            for name, f in signatures.items()}


# What TensorFlow logs (absl, INFO) when a signature's FunctionDef names an input otherwise than
# the graph did; tf.saved_model.save logs it for the tensors the signatures *capture*, too.
CAPTURE_RENAME = "with unsupported characters which will be renamed to"


class _CaptureRenames(logging.Filter):
    """Drops the rename line when none of the names it lists is a signature input."""

    def __init__(self, inputs: set[str]) -> None:
        super().__init__()
        self.inputs = inputs

    def filter(self, record: logging.LogRecord) -> bool:
        if CAPTURE_RENAME not in str(record.msg) or len(record.args or ()) < 2:
            return True
        return bool(set(str(record.args[1]).split(", ")) & self.inputs)


@contextlib.contextmanager
def capture_renames_unlogged(summary: dict[str, dict[str, list[str]]]) -> Iterator[None]:
    """Leaves out of the log TensorFlow's "Function `_serve_text` contains input name(s)
    params, wp_model, resource with unsupported characters which will be renamed to
    gatherv2_16_params, ..." while a SavedModel is saved, unless it names a signature input.

    The names are not tfbert's and no request sends them: they are the tensors the signatures
    capture (a tf.gather table, TF Text's wordpiece model, a Keras variable's handle), which
    TensorFlow names after the op argument that took them ("params", "wp_model", "resource")
    and files under that op's name scope; TF's check (signature_serialization.
    canonicalize_signatures) compares those too. The inputs a client names (`summary`, from
    `signature_summary`: text, text_b, input_ids, ...) are valid FunctionDef names and kept;
    a rename of one of them still logs. Checked with TensorFlow 2.21.0, TF Text 2.21.1 and
    Keras 3.15.1 (tests/test_cli_output.py).
    """
    inputs = {name for entry in summary.values() for name in entry["inputs"]}
    quiet = _CaptureRenames(inputs)
    absl_logger = logging.getLogger("absl")  # signature_serialization logs through absl
    absl_logger.addFilter(quiet)
    try:
        yield
    finally:
        absl_logger.removeFilter(quiet)


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
    signatures = module.signatures()
    record = {**dataclasses.asdict(spec), **(metadata or {}),
              "signatures": signature_summary(signatures)}

    def write(folder: str) -> None:
        with capture_renames_unlogged(record["signatures"]):
            tf.saved_model.save(module, folder, signatures=signatures)
        write_json(os.path.join(folder, EXPORT_RECORD), record)

    write_version(version_dir, write, overwrite)
    logger.info("wrote SavedModel %s (task %s, max_seq_length %d)", version_dir, spec.task,
                spec.seq_length)
    return module, version_dir
