"""TFLite export: an ids-in model (builtin ops only) and a text-in model (TF Text's TFLite kernels).

Files, per quantization q in {float32, float16, int8} (int8 = dynamic-range quantization:
int8 weights, float activations):

  model_ids_{q}.tflite   inputs input_ids/input_mask/segment_ids int32 [B, T]; TFLite builtin
                         ops only, so it runs on any LiteRT runtime.
  model_text_{q}.tflite  inputs text (and text_b) tf.string [B]; tokenizes with TF Text's
                         FastBertTokenizer kernels (custom ops FastBertNormalize,
                         FastWordpieceTokenizeWithOffsets, RaggedTensorToTensor; and
                         TFText>ByteSplitWithOffsets, TFText>ByteSplitByOffsets,
                         TFText>NgramsStringJoin to drop invalid UTF-8), packs with builtin
                         ops. Needs a runtime with TF Text's TFLite ops registered; in
                         Python: `tensorflow.lite.python.interpreter.InterpreterWithCustomOps(
                         custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)`.

The ids model checks its inputs as the SavedModel does (saved_model.id_input_checks: ids,
segment ids and mask in range, the three of one shape [B, T]), but TFLite has no Assert op, so a
failed check cannot carry a message: it makes the interpreter fail in a GATHER ("gather index out
of bounds ... (GATHER) failed to invoke"). In the text model TF Text's kernel checks the inputs'
rank ("Input values shape must be rank 1"), and a text_b count unlike text's fails in the
packer's GATHER ("input->dims->data[i] != positions->dims->data[i] ... failed to prepare").

Outputs: classification logits [B, C], probabilities [B, C], label_ids [B]; ner logits
[B, T, C], tag_ids [B, T]; qa start_logits/end_logits [B, T]; encoder pooled_output [B, H],
sequence_output [B, T, H]; the text model also returns the packed input_ids [B, T].

The text model is NOT the reference tokenizer. tfbert's in-graph tokenizer (tfbert.text) uses
core ops that have no TFLite kernels, and TF Text's FastBertTokenizer with
lower_case_nfd_strip_accents=True also applies NFKC-style folding (full-width "（１" become
"(1"), which changes most Chinese sentences. So the text model runs FastBertTokenizer without
normalization and handles an uncased vocab on the vocab side: pieces the reference can never
produce (they contain upper case or accents) are remapped to their normalized piece or made
unreachable, and UPPER / Title variants of every piece are added and mapped back to the
piece's id. What remains different from the reference: accents are kept (an uncased vocab
sees "café", not "cafe"), mixed-case words ("iPhone"), control characters split words instead
of vanishing, and the per-word limit counts 100 bytes instead of 100 characters. Invalid UTF-8
is read as the reference reads it (each invalid byte sequence decoded as U+FFFD, which cleaning
drops; U+FFFD in the text is dropped too): `drop_invalid_utf8` removes those bytes before
tokenizing (TF Text's ByteSplitWithOffsets, ByteSplitByOffsets and NgramsStringJoin kernels).
`measure_agreement` reports how often its ids equal the reference's. Measured on the built-in
corpus (1,000 People's Daily lines + 1,000 reviews, max_seq_length 128): 100% of texts get the
reference ids, with a character-level Chinese vocab and with MiniLM's uncased English vocab;
plain FastBertTokenizer(lower_case_nfd_strip_accents=True) matches 20.8% / 20.4% of them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import time
import unicodedata
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfbert.errors import UserError
from tfbert.export.layout import claim_files, write_owned_file
from tfbert.export.saved_model import ID_INPUTS, ExportSpec, id_input_checks, id_ranges

logger = logging.getLogger(__name__)

QUANTIZATIONS = ("float32", "float16", "int8")
KINDS = ("ids", "text")
# The custom ops the text model may contain: TF Text kernels in SELECT_TFTEXT_OPS.
TEXT_MODEL_CUSTOM_OPS = frozenset({"FastBertNormalize", "FastWordpieceTokenizeWithOffsets",
                                   "RaggedTensorToTensor", "TFText>ByteSplitWithOffsets",
                                   "TFText>ByteSplitByOffsets", "TFText>NgramsStringJoin"})
MAX_BYTES_PER_WORD = 100  # the reference's 100 characters per word, counted in bytes here
# Stretches of valid UTF-8 per text that drop_invalid_utf8 joins exactly; a text broken into
# more keeps the invalid bytes after the 255th stretch (its words there read as [UNK]).
UTF8_STRETCHES = 256


# --- checks and cleaning in TFLite ops -------------------------------------------------------


def _fail_unless(holds: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    """x, or an interpreter error when `holds` is False: TFLite has no Assert op, so a failed
    check reads element 1 of a 1-element table (GATHER: "gather index out of bounds")."""
    return x + tf.gather(tf.zeros([1], x.dtype), tf.cast(tf.logical_not(holds), tf.int32))


def _shifted(x: tf.Tensor, k: int, fill: Any) -> tf.Tensor:
    """[B, N] -> [B, N]: x[:, i + k], `fill` where i + k is off the row."""
    n = tf.shape(x)[1]
    pad = tf.fill([tf.shape(x)[0], tf.minimum(abs(k), n)], fill)
    if k > 0:
        return tf.concat([x[:, k:], pad], 1)[:, :n]
    return tf.concat([pad, x[:, :n + k]], 1)[:, :n]


def drop_invalid_utf8(text: tf.Tensor) -> tf.Tensor:
    """tf.string [B] -> [B]: the texts without invalid UTF-8 byte sequences and U+FFFD.

    The reference tokenizer decodes invalid sequences as U+FFFD and its cleaning drops every
    U+FFFD, so this is the text it tokenizes. Well-formed sequences are Unicode's Table 3-7
    (no overlong forms, surrogates or code points past U+10FFFF). In TFLite-convertible ops: the
    bytes are checked with builtin ops, and the stretches of kept bytes cut out
    (ByteSplitByOffsets) and joined again (NgramsStringJoin over UTF8_STRETCHES slots).
    """
    import tensorflow_text as tf_text

    splitter = tf_text.ByteSplitter()
    x0 = tf.cast(splitter.split(text), tf.int32).to_tensor(default_value=-1)  # [B, N] bytes
    x1, x2, x3 = (_shifted(x0, k, -1) for k in (1, 2, 3))
    within = lambda x, low, high: (x >= low) & (x <= high)
    tail = lambda x: within(x, 0x80, 0xBF)
    two = within(x0, 0xC2, 0xDF) & tail(x1)
    three = (((x0 == 0xE0) & within(x1, 0xA0, 0xBF)) | (within(x0, 0xE1, 0xEC) & tail(x1))
             | ((x0 == 0xED) & within(x1, 0x80, 0x9F)) | (within(x0, 0xEE, 0xEF) & tail(x1))
             ) & tail(x2) & ~((x0 == 0xEF) & (x1 == 0xBF) & (x2 == 0xBD))  # not U+FFFD
    four = (((x0 == 0xF0) & within(x1, 0x90, 0xBF)) | (within(x0, 0xF1, 0xF3) & tail(x1))
            | ((x0 == 0xF4) & within(x1, 0x80, 0x8F))) & tail(x2) & tail(x3)
    # Length of the kept sequence starting at each byte (0: none). A byte inside a sequence is
    # never the lead byte of another, so checking every position alone is exact.
    length = tf.where(within(x0, 0, 0x7F), 1, tf.where(two, 2, tf.where(three, 3,
                                                                          tf.where(four, 4, 0))))
    keep = length > 0
    for k in (1, 2, 3):
        keep |= _shifted(length, -k, 0) > k  # [B, N]
    first = keep & ~_shifted(keep, -1, False)  # first / last byte of a stretch
    last = keep & ~_shifted(keep, 1, False)
    batch, n, slots = tf.shape(x0)[0], tf.shape(x0)[1], UTF8_STRETCHES
    slot = tf.minimum(tf.cumsum(tf.cast(first, tf.int32), axis=1) - 1, slots - 1)
    segment = tf.range(batch)[:, None] * slots + slot  # [B, N]
    pos = tf.range(n)[tf.newaxis, :] + tf.zeros_like(slot)
    unused = batch * slots
    starts = tf.math.unsorted_segment_min(tf.reshape(pos, [-1]), tf.reshape(
        tf.where(first, segment, unused), [-1]), unused + 1)[:-1]
    ends = tf.math.unsorted_segment_max(tf.reshape(pos + 1, [-1]), tf.reshape(
        tf.where(last, segment, unused), [-1]), unused + 1)[:-1]
    found = starts < ends  # an empty slot has start int32 max, end int32 min
    starts = tf.reshape(tf.where(found, starts, 0), [batch, slots])
    ends = tf.reshape(tf.where(found, ends, 0), [batch, slots])
    stretches = splitter.split_by_offsets(text, starts, ends)  # [B, slots] strings
    # The op behind tf_text.ngrams(STRING_JOIN), whose Python side would also build an unused
    # sliding window of `slots` slices (seconds of tracing).
    from tensorflow_text.python.ops.ngrams_op import gen_ngrams_op

    joined, _ = gen_ngrams_op.tf_text_ngrams_string_join(
        input_values=stretches.values, input_row_splits=[stretches.row_splits], width=slots,
        axis=-1, string_separator="")
    return joined  # [B]: one window of all the slots per text


# --- the models to convert ---------------------------------------------------------------------


def _raw_outputs(model: Any, spec: ExportSpec, inputs: dict[str, tf.Tensor]
                 ) -> dict[str, tf.Tensor]:
    outputs = model(inputs, training=False)
    if spec.task == "classification":
        logits = tf.cast(outputs, tf.float32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}
    if spec.task == "ner":
        logits = tf.cast(outputs, tf.float32)
        return {"logits": logits, "tag_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}
    if spec.task == "qa":
        return {k: tf.cast(outputs[k], tf.float32) for k in ("start_logits", "end_logits")}
    return {"pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
            "sequence_output": tf.cast(outputs["sequence_output"], tf.float32)}


def case_extended_vocab(tokens: Sequence[str], lower_case: bool
                        ) -> tuple[list[str], np.ndarray]:
    """The vocab FastBertTokenizer runs on (no normalization) and the map back to model ids.

    Args:
        tokens: sequence of str. The model's vocab in id order.
        lower_case: bool. The model is uncased (the reference lower-cases, NFD, strips accents).

    Returns:
        (extended tokens, remap int32 [len(extended)]): extended[i] is matched in raw text and
        stands for model id remap[i].
    """
    tokens = list(tokens)
    remap = list(range(len(tokens)))
    if not lower_case:
        return tokens, np.asarray(remap, np.int32)
    index = {t: i for i, t in enumerate(tokens)}
    unk = index["[UNK]"]
    extended = list(tokens)

    def split(token: str) -> tuple[str, str]:
        return ("##", token[2:]) if token.startswith("##") and len(token) > 2 else ("", token)

    special = lambda t: t.startswith("[") and t.endswith("]") and len(t) > 2
    reachable = []
    for i, token in enumerate(tokens):
        if special(token):
            continue
        prefix, body = split(token)
        normalized = prefix + _reference_lower(body)
        if normalized == token:
            reachable.append(i)
        elif normalized in index:
            remap[i] = index[normalized]  # raw text spelled like this means that piece
        else:
            extended[i] = f"[tfbert_unreachable_{i}]"  # never matched (split at "[")
            remap[i] = unk
    present = set(extended)
    for i in reachable:
        prefix, body = split(tokens[i])
        for variant in (body.upper(), body.capitalize(), body.title()):
            candidate = prefix + variant
            if candidate not in present and _reference_lower(variant) == body:
                extended.append(candidate)
                remap.append(i)
                present.add(candidate)
    return extended, np.asarray(remap, np.int32)


def _reference_lower(text: str) -> str:
    """The reference's lower_case=True normalization of a piece: NFD, drop Mn, lower-case."""
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(c.lower() for c in decomposed if unicodedata.category(c) != "Mn")


class _TextPacker(tf.Module):
    """FastBertTokenizer + packing `[CLS] a [SEP] (b [SEP])` with TFLite-convertible ops."""

    def __init__(self, vocab: Sequence[str], spec: ExportSpec) -> None:
        super().__init__()
        import tensorflow_text as tf_text

        tokens = list(vocab)
        extended, remap = case_extended_vocab(tokens, spec.lower_case)
        self.fast = tf_text.FastBertTokenizer(
            vocab=extended, suffix_indicator="##", max_bytes_per_word=MAX_BYTES_PER_WORD,
            token_out_type=tf.int32, unknown_token="[UNK]", lower_case_nfd_strip_accents=False)
        self.remap = tf.constant(remap)
        self.spec = spec
        self.cls_id, self.sep_id, self.pad_id = (tokens.index(t) for t in
                                                 ("[CLS]", "[SEP]", "[PAD]"))

    def _pieces(self, text: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """tf.string [B] -> ids [B, T] (first T pieces, padded) and piece counts [B]."""
        ragged = self.fast.tokenize(drop_invalid_utf8(text))  # [B, (P)] extended-vocab ids
        ids = ragged.with_flat_values(tf.gather(self.remap, ragged.flat_values))
        splits = ids.row_splits
        lengths = tf.cast(splits[1:] - splits[:-1], tf.int32)  # [B]
        dense = ids.to_tensor(default_value=self.pad_id, shape=[None, self.spec.seq_length])
        return dense, lengths

    def __call__(self, text: tf.Tensor, text_b: tf.Tensor | None = None
                 ) -> dict[str, tf.Tensor]:
        t = self.spec.seq_length
        a, la = self._pieces(text)
        pos = tf.range(t)[tf.newaxis, :]  # [1, T]
        if text_b is None:
            la = tf.minimum(la, t - 2)
        else:
            b, lb = self._pieces(text_b)  # (a count unlike text's fails in GATHER below)
            budget = t - 3
            if self.spec.task == "qa":  # question first, cut; the context fills the rest
                la = tf.minimum(la, self.spec.max_query_length)
                lb = tf.minimum(lb, tf.maximum(budget - la, 0))
            else:  # longest first, ties cut segment b (the reference's _truncate_seq_pair)
                la_new = tf.minimum(la, tf.maximum(budget - lb, (budget + 1) // 2))
                lb = tf.minimum(lb, tf.maximum(budget - la, budget // 2))
                la = la_new
        la_ = la[:, None]  # [B, 1]
        in_a = (pos >= 1) & (pos <= la_)
        from_a = tf.gather(a, tf.clip_by_value(pos - 1, 0, t - 1) + tf.zeros_like(la_),
                           batch_dims=1)  # [B, T]
        ids = tf.where(in_a, from_a, self.pad_id)
        sep = pos == la_ + 1
        length = la_ + 2
        segment = tf.zeros_like(ids)
        if text_b is not None:
            lb_ = lb[:, None]
            in_b = (pos >= la_ + 2) & (pos <= la_ + lb_ + 1)
            from_b = tf.gather(b, tf.clip_by_value(pos - la_ - 2, 0, t - 1), batch_dims=1)
            ids = tf.where(in_b, from_b, ids)
            sep |= pos == la_ + lb_ + 2
            length += lb_ + 1
            # (tf.where, not a cast of the bool: the converter turns that cast into an invalid
            # zeros_like of bools inside the embedding lookup)
            segment = tf.where((pos >= la_ + 2) & (pos < length), 1, 0)
        ids = tf.where(pos == 0, self.cls_id, tf.where(sep, self.sep_id, ids))
        mask = tf.cast(pos < length, tf.int32)
        return {"input_ids": ids, "input_mask": mask, "segment_ids": segment}


def _ids_module(model: Any, spec: ExportSpec) -> tf.Module:
    module = tf.Module()
    module.model = model
    module._model_variables = [v.value for v in model.variables]
    specs = [tf.TensorSpec([None, spec.seq_length], tf.int32, name=n) for n in ID_INPUTS]

    ranges = id_ranges(model, spec)

    @tf.function(input_signature=specs)
    def serve(input_ids, input_mask, segment_ids):
        inputs = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
        stages = id_input_checks(spec.seq_length, ranges)  # (TFLite has no Assert: all at once)
        holds = tf.reduce_all(tf.stack([check[0] for stage in stages for check in stage(inputs)]))
        return _raw_outputs(model, spec, {k: _fail_unless(holds, v) for k, v in inputs.items()})

    module.serve = serve
    return module


def _text_module(model: Any, spec: ExportSpec, vocab: Sequence[str]) -> tf.Module:
    module = tf.Module()
    module.model = model
    module._model_variables = [v.value for v in model.variables]
    module.packer = _TextPacker(vocab, spec)
    specs = [tf.TensorSpec([None], tf.string, name="text")]
    if spec.has_text_b:
        specs.append(tf.TensorSpec([None], tf.string, name="text_b"))

    def run(text, text_b=None):
        inputs = module.packer(text, text_b)
        return {**_raw_outputs(model, spec, inputs), "input_ids": inputs["input_ids"]}

    module.serve = tf.function(run, input_signature=specs)
    return module


# --- conversion ------------------------------------------------------------------------------


def convert(module: tf.Module, quantization: str, custom_ops: bool) -> bytes:
    """Converts `module.serve` to a TFLite flatbuffer.

    Args:
        module: tf.Module with a `serve` tf.function (input signature set).
        quantization: str. "float32", "float16" (float16 weights) or "int8" (dynamic range).
        custom_ops: bool. Allow custom ops (TF Text kernels); False = builtin ops only.
    """
    if quantization not in QUANTIZATIONS:
        raise UserError(f"tflite.py: quantization {quantization!r} is not one of "
                        f"{QUANTIZATIONS}")
    from tfbert.ops import use_forms

    # keras's own ops, not the TensorFlow graph forms of the SavedModel (tfbert/ops): the
    # converter would decompose the fused LayerNorm into more ops, and a larger int8 file.
    with tempfile.TemporaryDirectory() as tmp, use_forms("stock"):
        tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
        converter = tf.lite.TFLiteConverter.from_saved_model(tmp)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.allow_custom_ops = custom_ops
        if quantization != "float32":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        return converter.convert()


def tflite_ops(content: bytes) -> tuple[list[str], list[str]]:
    """(builtin op names, custom op names) used by a TFLite flatbuffer."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(content, 0)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    builtin, custom = set(), set()
    for code in model.operatorCodes:
        if code.customCode:
            custom.add(code.customCode.decode())
        else:
            builtin.add(names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?"))
    return sorted(builtin), sorted(custom)


def make_interpreter(path_or_content: str | bytes, text_ops: bool,
                     num_threads: int | None = None) -> Any:
    """A Python TFLite interpreter; `text_ops` registers TF Text's TFLite kernels.

    num_threads: CPU threads for its kernels (XNNPACK included); None is TFLite's default,
    one thread.
    """
    from tensorflow.lite.python import interpreter as interpreter_lib

    source = ({"model_path": path_or_content} if isinstance(path_or_content, str)
              else {"model_content": path_or_content})
    if num_threads is not None:
        source["num_threads"] = num_threads
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        # tf.lite.Interpreter warns that it moves to ai_edge_litert; TF Text's custom-op hook
        # exists only here.
        warnings.simplefilter("ignore", UserWarning)
        if text_ops:
            import tensorflow_text as tf_text

            return interpreter_lib.InterpreterWithCustomOps(
                custom_op_registerers=tf_text.tflite_registrar.SELECT_TFTEXT_OPS, **source)
        return interpreter_lib.Interpreter(**source)


def run_tflite(interpreter: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs the single signature of an interpreter on numpy inputs (any batch size)."""
    runner = interpreter.get_signature_runner()
    return runner(**inputs)


def _latency_ms(interpreter: Any, inputs: dict[str, np.ndarray], runs: int = 10) -> float:
    runner = interpreter.get_signature_runner()
    runner(**inputs)  # warm-up (allocation)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        runner(**inputs)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1000)


def tflite_file_names(quantizations: Sequence[str], kinds: Sequence[str] = KINDS) -> list[str]:
    """The .tflite files export_tflite writes (UserError for an unknown quantization or kind)."""
    unknown = [q for q in quantizations if q not in QUANTIZATIONS]
    unknown += [k for k in kinds if k not in KINDS]
    if unknown:
        raise UserError(f"tflite.py: unknown quantization(s)/kind(s) {unknown}; use "
                        f"{QUANTIZATIONS} and {KINDS}")
    return [f"model_{kind}_{q}.tflite" for kind in kinds for q in quantizations]


def _vocab_bytes(vocab_file: str) -> bytes:
    from tfbert.text.vocab import load_vocab

    return ("\n".join(load_vocab(vocab_file)) + "\n").encode("utf-8")


def check_tflite_dir(output_dir: str, vocab_file: str, quantizations: Sequence[str],
                     kinds: Sequence[str] = KINDS, overwrite: bool = False) -> None:
    """Raises UserError unless export_tflite may write its files into output_dir.

    A file of the names it writes (vocab.txt, model_{kind}_{quantization}.tflite) that is
    already there may hold the same bytes, or, with overwrite, be one that tfbert wrote
    (layout.claim_files); other files in the folder are never touched.
    """
    names = tflite_file_names(quantizations, kinds)
    claim_files(output_dir, {"vocab.txt": _vocab_bytes(vocab_file), **dict.fromkeys(names)},
                overwrite)


def export_tflite(model: Any, spec: ExportSpec, vocab_file: str, output_dir: str,
                  quantizations: Sequence[str] = ("float32",),
                  kinds: Sequence[str] = KINDS,
                  sample_text: str = "今天天气很好，我们去公园散步。",
                  overwrite: bool = False) -> dict[str, dict[str, Any]]:
    """Writes the ids-in and/or text-in TFLite models and measures them.

    Every file is written atomically (a temp file renamed over it) and recorded in
    output_dir/tfbert_tflite.json; see `check_tflite_dir` for what may be replaced.

    Args:
        model: tfbert task model or BertEncoder.
        spec: ExportSpec. Task, max_seq_length, truncation settings.
        vocab_file: str. The model's vocab (the text model embeds it; copied next to the files).
        output_dir: str. Created if missing.
        quantizations: sequence of "float32", "float16", "int8".
        kinds: sequence of "ids" (builtin ops only) and "text" (TF Text kernels).
        sample_text: str. Input of the latency measurement (batch 1).
        overwrite: bool. Replace files of these names that tfbert wrote before.

    Returns:
        {file name: {"path", "inputs" ("ids" or "text"), "quantization", "bytes",
        "latency_ms" (median of 10 runs, batch 1, this CPU), "builtin_ops", "custom_ops"}}.
    """
    from tfbert.text.vocab import load_vocab

    check_tflite_dir(output_dir, vocab_file, quantizations, kinds, overwrite)
    write_owned_file(output_dir, "vocab.txt", _vocab_bytes(vocab_file), overwrite)
    text_module = _text_module(model, spec, load_vocab(vocab_file))
    text_inputs = {"text": np.array([sample_text.encode()], dtype=object)}
    if spec.has_text_b:
        text_inputs["text_b"] = np.array([sample_text.encode()], dtype=object)
    ids_inputs = {k: v.numpy() for k, v in text_module.packer(
        *[tf.constant(v) for v in text_inputs.values()]).items()}
    modules = {"ids": _ids_module(model, spec), "text": text_module}
    results = {}
    for kind in kinds:
        for quantization in quantizations:
            name = f"model_{kind}_{quantization}.tflite"
            content = convert(modules[kind], quantization, custom_ops=kind == "text")
            builtin, custom = tflite_ops(content)
            unexpected = sorted(set(custom) - (TEXT_MODEL_CUSTOM_OPS if kind == "text"
                                               else set()))
            if unexpected:  # allow_custom_ops would let any unconverted TF op through
                raise ValueError(f"tflite.py: {name} needs custom ops {unexpected} that no "
                                 "TF Text TFLite kernel provides")
            path = write_owned_file(output_dir, name, content, overwrite)
            interpreter = make_interpreter(path, text_ops=kind == "text")
            latency = _latency_ms(interpreter, text_inputs if kind == "text" else ids_inputs)
            results[name] = {"path": path, "inputs": kind, "quantization": quantization,
                             "bytes": len(content), "latency_ms": latency,
                             "builtin_ops": builtin, "custom_ops": custom}
            logger.info("%s: %.1f KiB, %.2f ms (batch 1, median of 10)", name,
                        len(content) / 1024, latency)
    return results


def run_text_tflite(tflite_path: str, texts: Sequence[str],
                    texts_b: Sequence[str] | None = None,
                    output: str = "probabilities") -> np.ndarray:
    """One output of a text-in .tflite model (TF Text kernels registered) for a batch of texts.

    Args:
        tflite_path: str. A model_text_*.tflite file.
        texts: sequence of str. The `text` input.
        texts_b: sequence of str or None. The `text_b` input of pair / QA models.
        output: str. Output name: "probabilities", "label_ids", "logits", "start_logits", ...

    Returns:
        The output array, batch first.
    """
    inputs = {"text": np.array([t.encode() for t in texts], dtype=object)}
    if texts_b is not None:
        inputs["text_b"] = np.array([t.encode() for t in texts_b], dtype=object)
    outputs = run_tflite(make_interpreter(tflite_path, text_ops=True), inputs)
    if output not in outputs:
        raise KeyError(f"tflite.py: {tflite_path} has no output {output!r}; it has "
                       f"{sorted(outputs)}")
    return outputs[output]


def evaluate_accuracy(tflite_path: str, texts: Sequence[str], labels: Sequence[int],
                      vocab_file: str | None = None, spec: ExportSpec | None = None,
                      batch_size: int = 64) -> float:
    """Accuracy of a classification .tflite file on labelled texts.

    Args:
        tflite_path: str. A model_ids_* (needs vocab_file and spec: inputs are made with
            tfbert.BertPreprocessor, the reference) or model_text_* file.
        texts: sequence of str. Single texts.
        labels: sequence of int. Gold class ids.
        vocab_file: str or None. For ids models.
        spec: ExportSpec or None. For ids models (seq_length, lower_case).
        batch_size: int. Texts per interpreter call.

    Returns:
        Fraction of texts whose `label_ids` equal the gold label.
    """
    import tfbert

    text_model = "model_text_" in os.path.basename(tflite_path)
    interpreter = make_interpreter(tflite_path, text_ops=text_model)
    preprocessor = None
    if not text_model:
        if vocab_file is None or spec is None:
            raise UserError("tflite.py: an ids model needs vocab_file and spec to tokenize")
        preprocessor = tfbert.BertPreprocessor(vocab_file, spec.seq_length,
                                               lower_case=spec.lower_case)
    correct = 0
    for begin in range(0, len(texts), batch_size):
        chunk = list(texts[begin:begin + batch_size])
        if text_model:
            inputs = {"text": np.array([t.encode() for t in chunk], dtype=object)}
        else:
            inputs = {k: v.numpy() for k, v in preprocessor(tf.constant(chunk)).items()}
        predicted = run_tflite(interpreter, inputs)["label_ids"]
        correct += int(np.sum(predicted == np.asarray(labels[begin:begin + batch_size])))
    return correct / max(len(texts), 1)


def sentiment_accuracy(tflite_dir: str, model_dir: str, max_examples: int | None = None
                       ) -> dict[str, float]:
    """Accuracy of every classification .tflite file in a folder on the built-in sentiment
    test split (for a model fine-tuned with run_classifier --task_name=sentiment).

    Args:
        tflite_dir: str. Folder with model_{ids,text}_*.tflite (export_tflite's output_dir).
        model_dir: str. The fine-tuned model directory (labels, vocab, max_seq_length).
        max_examples: int or None. Use only the first N test examples.

    Returns:
        {file name: accuracy}.
    """
    from tfbert.data import classification
    from tfbert.export import load_for_export

    _, vocab_file, spec, _ = load_for_export(model_dir)
    examples = classification.builtin_examples("sentiment", "test")[:max_examples]
    index = {name: i for i, name in enumerate(spec.labels)}
    texts = [e.text for e in examples]
    labels = [index[e.label] for e in examples]
    return {name: evaluate_accuracy(os.path.join(tflite_dir, name), texts, labels, vocab_file,
                                    spec)
            for name in sorted(os.listdir(tflite_dir)) if name.endswith(".tflite")}


def measure_agreement(vocab_file: str, spec: ExportSpec, texts: Sequence[str],
                      tflite_path: str | None = None, batch_size: int = 256
                      ) -> dict[str, float]:
    """How often the text model's input_ids equal the reference tokenizer + packer's.

    Args:
        vocab_file: str. The model's vocab.
        spec: ExportSpec. Sequence length and lower_case.
        texts: sequence of str. Single texts (the comparison packs segment a only).
        tflite_path: str or None. A model_text_*.tflite of a single-text model to run; None
            runs the same packing graph in TensorFlow (the TFLite kernels are TF Text's same
            C++ code).
        batch_size: int. Texts per call.

    Returns:
        {"texts": n, "equal_texts": fraction of texts with identical packed ids,
         "equal_tokens": fraction of reference pieces reproduced at the same position}.
    """
    import tfbert
    from tfbert.text.vocab import load_vocab

    if tflite_path is not None and spec.has_text_b:
        raise UserError("tflite.py: measure_agreement compares single texts; give the "
                        "model_text file of a single-text model, or tflite_path=None")
    single = ExportSpec(task="encoder", seq_length=spec.seq_length, lower_case=spec.lower_case)
    reference = tfbert.BertPreprocessor(vocab_file, spec.seq_length, lower_case=spec.lower_case)
    packer = _TextPacker(load_vocab(vocab_file), single)
    interpreter = None if tflite_path is None else make_interpreter(tflite_path, text_ops=True)
    equal_texts = equal_tokens = total_tokens = 0
    for begin in range(0, len(texts), batch_size):
        chunk = list(texts[begin:begin + batch_size])
        want = reference(tf.constant(chunk))
        want_ids, want_mask = want["input_ids"].numpy(), want["input_mask"].numpy()
        if interpreter is None:
            got = packer(tf.constant(chunk))["input_ids"].numpy()
        else:
            args = {"text": np.array([t.encode() for t in chunk], dtype=object)}
            got = run_tflite(interpreter, args)["input_ids"]
        equal_texts += int(np.sum(np.all(got == want_ids, axis=1)))
        real = want_mask.astype(bool)
        equal_tokens += int(np.sum((got == want_ids) & real))
        total_tokens += int(real.sum())
    n = len(texts)
    return {"texts": n, "equal_texts": equal_texts / max(n, 1),
            "equal_tokens": equal_tokens / max(total_tokens, 1)}
