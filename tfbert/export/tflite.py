"""TFLite export: an ids-in model (builtin ops only) and a text-in model (TF Text's TFLite kernels).

Files, per quantization q in {float32, float16, int8}:

  float16  float16 weights, dequantized to float32 when the interpreter loads them.
  int8     dynamic-range quantization: the weights of every matmul with at least 1,024 of them
           (the encoder's projections, per output channel) and the word-embedding table (one
           scale) in int8, activations float32 (the interpreter quantizes a matmul's input per
           call); LayerNorm, softmax, GELU, the position embeddings, a task head under 1,024
           weights and a CRF's Viterbi stay float32 (`tflite_op_inputs` reads which is which
           from a file). On the built-in 2-layer hidden-128 model it scores within 0.2 point
           of the float model on sentiment and NER, CRF included (docs/serving.md, TFLite,
           "Quantization").

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

The ids model checks its inputs as the SavedModel does (input_checks.id_input_checks: ids,
segment ids and mask in range, the three of one shape [B, T]), but TFLite has no Assert op, so a
failed check cannot carry a message: it makes the interpreter fail in a GATHER ("gather index out
of bounds ... (GATHER) failed to invoke"). In the text model TF Text's kernel checks the inputs'
rank ("Input values shape must be rank 1"), and a text_b count unlike text's fails in the
packer's GATHER ("input->dims->data[i] != positions->dims->data[i] ... failed to prepare").

Outputs: classification logits [B, C], probabilities [B, C], label_ids [B] (multi-label:
logits, probabilities (sigmoid), thresholds and label_mask int32, each [B, C]); ner logits
[B, T, C], tag_ids [B, T] (a CRF model: its Viterbi tags over the chained pieces, as
saved_model.py's serve_ids, -1 elsewhere; the Viterbi runs in float32 at every quantization);
qa start_logits/end_logits [B, T]; encoder pooled_output [B, H],
sequence_output [B, T, H]; the text model also returns the packed input_ids [B, T].
Long texts: the ids model takes one window per row (tfbert/export/window_inputs.py makes
them and merges the outputs); the text model packs the first window only (the SavedModel's
text signature reads them all). TFLite has no window path, so no request length limit either
(ExportSpec.max_request_chars is the SavedModel's): the text model's memory grows linearly with
the longest text's bytes.

The text model's tokenizer and packer are in `tflite_text.py` (what differs from the reference
tokenizer, and how); `tflite_eval.py` measures .tflite files (accuracy, agreement with the
reference ids).
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfbert.errors import UserError
from tfbert.export.input_checks import ID_INPUTS, id_input_checks, id_ranges
from tfbert.export.layout import claim_files, write_owned_file
from tfbert.export.saved_model import ExportSpec
from tfbert.export.tflite_text import TEXT_MODEL_CUSTOM_OPS, TextPacker
from tfbert.ops import use_forms
from tfbert.text.vocab import load_vocab

logger = logging.getLogger(__name__)

QUANTIZATIONS = ("float32", "float16", "int8")
KINDS = ("ids", "text")


# --- checks in TFLite ops --------------------------------------------------------------------


def _fail_unless(holds: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    """x, or an interpreter error when `holds` is False: TFLite has no Assert op, so a failed
    check reads element 1 of a 1-element table (GATHER: "gather index out of bounds")."""
    return x + tf.gather(tf.zeros([1], x.dtype), tf.cast(tf.logical_not(holds), tf.int32))


# --- the models to convert ---------------------------------------------------------------------


def _raw_outputs(model: Any, spec: ExportSpec, inputs: dict[str, tf.Tensor],
                 continuation: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """The task head's outputs (tfbert/tasks/*_serving.py) of the model on `inputs`."""
    return spec.head.tflite_outputs(model, spec, inputs, model(inputs, training=False),
                                    continuation)


def _continuation_table(model: Any, spec: ExportSpec, vocab: Sequence[str]) -> tf.Tensor:
    """bool [V]: the id is a "##" piece (ids past the vocab are not)."""
    size = id_ranges(model)["input_ids"]
    flags = [token.startswith("##") for token in vocab][:size]
    return tf.constant(flags + [False] * (size - len(flags)))


def _ids_module(model: Any, spec: ExportSpec, vocab: Sequence[str] = ()) -> tf.Module:
    module = tf.Module()
    module.model = model
    module._model_variables = [v.value for v in model.variables]
    specs = [tf.TensorSpec([None, spec.seq_length], tf.int32, name=n) for n in ID_INPUTS]

    ranges = id_ranges(model)
    continuation = _continuation_table(model, spec, vocab)

    @tf.function(input_signature=specs)
    def serve(input_ids, input_mask, segment_ids):
        inputs = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
        # (TFLite has no Assert: all at once)
        stages = id_input_checks(spec.seq_length, ranges, fed_shapes=False)
        holds = tf.reduce_all(tf.stack([check[0] for stage in stages for check in stage(inputs)]))
        return _raw_outputs(model, spec, {k: _fail_unless(holds, v) for k, v in inputs.items()},
                            continuation)

    module.serve = serve
    return module


def _text_module(model: Any, spec: ExportSpec, vocab: Sequence[str]) -> tf.Module:
    module = tf.Module()
    module.model = model
    module._model_variables = [v.value for v in model.variables]
    module.packer = TextPacker(vocab, spec)
    continuation = _continuation_table(model, spec, vocab)
    specs = [tf.TensorSpec([None], tf.string, name="text")]
    if spec.has_text_b:
        specs.append(tf.TensorSpec([None], tf.string, name="text_b"))

    def run(text, text_b=None):
        inputs = module.packer(text, text_b)
        return {**_raw_outputs(model, spec, inputs, continuation),
                "input_ids": inputs["input_ids"]}

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


def _read_flatbuffer(content: bytes) -> tuple[Any, Any]:
    """(the model as TFLite's schema objects, the schema module) of a TFLite flatbuffer.

    TensorFlow's only public reader of a model's ops, `tf.lite.experimental.Analyzer`, prints
    a text report; this reads the flatbuffer with the schema classes generated into
    `tensorflow.lite.python.schema_py_generated` instead. Checked on tensorflow 2.21.0.
    """
    # TFLite's flatbuffer schema: loaded only when a .tflite file is inspected.
    from tensorflow.lite.python import schema_py_generated as schema

    return schema.ModelT.InitFromPackedBuf(content, 0), schema


def _op_name(code: Any, schema: Any) -> str:
    if code.customCode:
        return code.customCode.decode()
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    return names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?")


def tflite_ops(content: bytes) -> tuple[list[str], list[str]]:
    """(builtin op names, custom op names) used by a TFLite flatbuffer."""
    model, schema = _read_flatbuffer(content)
    builtin, custom = set(), set()
    for code in model.operatorCodes:
        (custom if code.customCode else builtin).add(_op_name(code, schema))
    return sorted(builtin), sorted(custom)


def tflite_op_inputs(content: bytes) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """Every operator of a TFLite flatbuffer (all subgraphs, the WHILE loops' included) with
    its inputs: [(op name, [(type, elements, quantization scales), ...]), ...].

    type is TFLite's tensor type name ("FLOAT32", "INT8", "INT32", ...); elements the
    tensor's size in its stored shape (-1 for a dynamic dimension counts as 1); scales the
    length of its quantization scale list (0: not quantized, 1: one scale for the tensor, N:
    one per channel). An omitted optional input is ("NONE", 0, 0).
    """
    model, schema = _read_flatbuffer(content)
    types = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    ops = []
    for graph in model.subgraphs:
        for op in graph.operators:
            inputs = []
            for index in op.inputs:
                if index < 0:
                    inputs.append(("NONE", 0, 0))
                    continue
                tensor = graph.tensors[index]
                shape = [] if tensor.shape is None else [max(int(d), 1) for d in tensor.shape]
                scale = None if tensor.quantization is None else tensor.quantization.scale
                inputs.append((types.get(tensor.type, "?"), int(np.prod(shape)),
                               0 if scale is None else len(scale)))
            ops.append((_op_name(model.operatorCodes[op.opcodeIndex], schema), inputs))
    return ops


def make_interpreter(path_or_content: str | bytes, text_ops: bool,
                     num_threads: int | None = None) -> Any:
    """A Python TFLite interpreter; `text_ops` registers TF Text's TFLite kernels.

    num_threads: CPU threads for its kernels (XNNPACK included); None is TFLite's default,
    one thread.
    """
    source = ({"model_path": path_or_content} if isinstance(path_or_content, str)
              else {"model_content": path_or_content})
    if num_threads is not None:
        source["num_threads"] = num_threads
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        # tf.lite.Interpreter warns that it moves to ai_edge_litert.
        warnings.simplefilter("ignore", UserWarning)
        if text_ops:
            return _interpreter_with_text_ops(source)
        return tf.lite.Interpreter(**source)


def _interpreter_with_text_ops(source: dict[str, Any]) -> Any:
    """An interpreter with TF Text's TFLite kernels registered.

    `tf.lite.Interpreter` takes no custom-op registerers; its subclass
    `tensorflow.lite.python.interpreter.InterpreterWithCustomOps` does, and TF Text's TFLite
    guide names it for `tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS`. Checked on
    tensorflow 2.21.0 with tensorflow-text 2.21.1.
    """
    # The interpreter and the TF Text ops it runs: loaded only when a .tflite file is run.
    import tensorflow_text as tf_text
    from tensorflow.lite.python import interpreter as interpreter_lib

    return interpreter_lib.InterpreterWithCustomOps(
        custom_op_registerers=tf_text.tflite_registrar.SELECT_TFTEXT_OPS, **source)


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
    return ("\n".join(load_vocab(vocab_file)) + "\n").encode("utf-8")


def check_tflite_model(model: Any, quantizations: Sequence[str]) -> None:
    """Raises UserError for a quantization the TFLite export does not know, before anything
    is converted. Every task model converts at every quantization. A CRF model's int8 file
    has the encoder's weights in int8 and the CRF in float32 (dynamic-range quantization
    makes int8 the constant weights of matmuls and of the embedding gather; the transitions
    feed ADD): on the built-in NER test split (4,776 sentences) the 2-layer hidden-128 CRF
    model's int8 tags equal its float tags for 99.96% of the characters and its entity F1
    moves by -0.10 point (`python -m experiments.int8_study`, docs/serving.md)."""
    tflite_file_names(quantizations, kinds=())
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
    check_tflite_model(model, quantizations)
    check_tflite_dir(output_dir, vocab_file, quantizations, kinds, overwrite)
    write_owned_file(output_dir, "vocab.txt", _vocab_bytes(vocab_file), overwrite)
    text_module = _text_module(model, spec, load_vocab(vocab_file))
    text_inputs = {"text": np.array([sample_text.encode()], dtype=object)}
    if spec.has_text_b:
        text_inputs["text_b"] = np.array([sample_text.encode()], dtype=object)
    ids_inputs = {k: v.numpy() for k, v in text_module.packer(
        *[tf.constant(v) for v in text_inputs.values()]).items()}
    modules = {"ids": _ids_module(model, spec, load_vocab(vocab_file)), "text": text_module}
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
