"""Export: SavedModel for TF Serving (raw text in), serving-op check, TFLite.

    python -m tfbert.export --model_dir=DIR --export_dir=saved_models/NAME \
        [--tflite=float32,float16,int8] [--overwrite]
    python -m tfbert.export.check_serving saved_models/NAME/1

Library entry point: `export_model(model_dir, export_dir, tflite=(...)) -> dict`.
Modules: `saved_model` (signatures), `layout` (which version folder an export writes, what it
may replace, kill-safe writing), `target_cpu` (the serving CPU's kind and what the export picks
for it), `check_serving` (ops vs TF Serving releases), `tflite` (ids-in
and text-in .tflite files), `tf_text_ops` / `tf_core_ops` (op registries of the TF Serving
releases, measured). TensorFlow and Keras load inside the functions, so `import tfbert.export`
stays cheap.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from typing import Any

from tfbert import checkpoints, ownership
from tfbert.errors import UserError
from tfbert.export.layout import is_tfbert_export, lock_model_folder, model_folder, version_folder

logger = logging.getLogger(__name__)

__all__ = ["export_model", "load_for_export"]

DTYPES = ("float32", "bfloat16")


def load_for_export(model_dir: str, max_seq_length: int | None = None,
                    pair: bool | None = None,
                    dtype: str = "float32") -> tuple[Any, str, Any, dict[str, Any]]:
    """Loads a model directory and works out what its export looks like.

    Args:
        model_dir: str. A tfbert directory from save_pretrained (fine-tuned run_classification /
            run_ner / run_qa output, or a pretrained model such as run_pretraining's
            model/, which exports its encoder), or any checkpoint
            `tfbert.from_pretrained` reads: a fine-tuned Hugging Face or Google one exports
            its task head (HF's id2label as the label names), others the encoder. Must hold
            vocab.txt. A run's output_dir with neither vocab.txt nor tfbert.json but a
            tfbert model directory in model/ stands for that model/ folder.
        max_seq_length: int or None. Overrides the saved max_seq_length (needed for encoders
            saved without one; default then 128).
        pair: bool or None. Classification: sentence-pair model (`text_b` input). None reads
            metadata "pair" (default False).
        dtype: str. "float32", or "bfloat16": matmul weights and activations in bfloat16
            (embeddings, LayerNorm, softmax and the logits stay float32), for CPUs with AMX /
            AVX512-BF16 and for GPUs; tfbert format only.

    Returns:
        (keras model, vocab file, ExportSpec, metadata dict).
    """
    # Here and below: TensorFlow, Keras and the models load when an export runs, so that
    # `import tfbert.export` (and `--help`) stays cheap.
    from tfbert.export import heads
    from tfbert.export.saved_model import ExportSpec
    from tfbert.models import pretrained
    from tfbert.tasks import registry

    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"{model_dir}: no such model directory")
    run_model = os.path.join(model_dir, "model")  # in a fine-tuning or pretraining run's dir
    is_run_dir = not any(os.path.isfile(os.path.join(model_dir, name))
                         for name in ("vocab.txt", checkpoints.native.METADATA_FILE))
    if is_run_dir and os.path.isfile(os.path.join(run_model, checkpoints.native.METADATA_FILE)):
        logger.info("%s holds no model; exporting the run's model folder %s", model_dir,
                    run_model)
        model_dir = run_model
    vocab_file = os.path.join(model_dir, "vocab.txt")
    if not os.path.isfile(vocab_file):
        also = (f", and {run_model} is no tfbert model directory (tfbert.json)"
                if is_run_dir and model_dir != run_model else "")
        raise FileNotFoundError(f"{model_dir}: no vocab.txt{also}; the export puts the "
                                "tokenizer in the graph and needs the model's vocab")
    if dtype not in DTYPES:
        raise UserError(f"export dtype {dtype!r} is not one of {DTYPES}")
    fmt = checkpoints.detect_format(model_dir)
    if fmt == "tfbert":
        metadata = checkpoints.read_metadata(model_dir)
        model = pretrained.load_model(model_dir, dtype=None if dtype == "float32" else dtype)
    elif dtype != "float32":
        raise UserError(f"{model_dir}: a {dtype} export needs a model directory in tfbert's "
                        f"format (this one is {fmt}); save it with tfbert.save_pretrained first")
    else:
        # A fine-tuned HF or Google checkpoint gives its task model, task and labels (HF's
        # id2label; Google's carry none), as tfbert.json would; a sentence-transformers
        # directory its max_seq_length and casing too.
        checkpoint = checkpoints.read_checkpoint(model_dir)
        metadata = {k: v for k, v in (checkpoint.metadata or {}).items()
                    if k in ("task", "labels", "max_seq_length", "lower_case")}
        model = pretrained.from_pretrained(checkpoint)
    class_name = type(model).__name__
    try:
        registered = registry.task_of(model)
    except UserError as e:
        raise UserError(f"{model_dir}: cannot export: {e}") from None
    head = heads.get(registered.export)
    model = head.served_model(model)
    if metadata.get("task") not in (None, registered.name, head.name):
        raise UserError(f"{model_dir}: tfbert.json says task {metadata['task']!r} but the model "
                        f"is a {class_name} ({head.name})")
    encoder_config = getattr(model, "encoder", model).config
    seq_length = max_seq_length or metadata.get("max_seq_length")
    if seq_length is None:
        seq_length = min(128, encoder_config.max_position_embeddings)
        logger.warning("%s has no max_seq_length in tfbert.json; exporting with %d",
                       model_dir, seq_length)
    if seq_length > encoder_config.max_position_embeddings:
        raise UserError(f"max_seq_length {seq_length} exceeds the model's "
                        f"max_position_embeddings {encoder_config.max_position_embeddings}")
    fields = head.spec_fields(model, metadata, model_dir)
    if pair is not None and head.text_b == "pair":
        fields["pair"] = pair
    spec = ExportSpec(task=head.name, seq_length=int(seq_length),
                      lower_case=bool(metadata.get("lower_case", encoder_config.lower_case)),
                      **fields)
    return model, vocab_file, spec, metadata


def export_model(model_dir: str, export_dir: str, tflite: Sequence[str] = (),
                 tflite_dir: str | None = None, text_tflite: bool = True,
                 max_seq_length: int | None = None, pair: bool | None = None,
                 check: bool = True, dtype: str = "float32",
                 jit_compile: bool | None = None, trim_padding: bool = True,
                 cpu_streams: int | None = None, overwrite: bool = False,
                 target_cpu: str = "auto", max_request_chars: int | None = None
                 ) -> dict[str, Any]:
    """Exports a model directory as a TF Serving SavedModel (and optionally TFLite files).

    The export writes only what it owns (tfbert/export/layout.py). export_dir named by a number
    (saved_models/NAME/3) is that version folder: written if new or empty, replaced only if it
    holds a tfbert export (saved_model.pb and assets.extra/tfbert_export.json) and `overwrite`
    is set, never if it holds anything else. Any other export_dir (saved_models/NAME) is the
    model's base folder and the export becomes its next version, the highest numeric folder
    there + 1 (1 when there is none); a base folder holding anything besides numeric version
    folders and tflite/ (such as `.` or a fine-tuning run's folder) is an error. The version is
    written to a temp folder beside it and renamed into place; an earlier version is swapped
    out atomically, so a failure or kill leaves it whole; the files in it that tfbert did not
    write (its record lists those it did) are copied into the new version unchanged. TFLite
    files already in tflite_dir are replaced only with `overwrite` and only if tfbert wrote them
    (its tfbert_tflite.json there lists them unchanged), or left alone when they hold the same
    bytes; other files there are never touched. The export holds the base folder's lock
    (`.tfbert.lock`) from choosing its version until its last file is written. Every refusal
    (another export holding the lock, a cpu_streams the model cannot take) is a UserError raised
    before anything is written; a full disk is a UserError saying the previous version is
    intact.

    Args:
        model_dir: str. See `load_for_export`.
        export_dir: str. saved_models/NAME (adds the next version) or saved_models/NAME/VERSION.
        tflite: sequence of "float32", "float16", "int8". TFLite files to write (none: skip).
        tflite_dir: str or None. Where .tflite files go; default saved_models/NAME/tflite
            (beside the version directories, which TF Serving ignores).
        text_tflite: bool. Also write text-in TFLite models.
        max_seq_length: int or None. Overrides the saved max_seq_length.
        pair: bool or None. Classification on sentence pairs; None reads the metadata.
        check: bool. Run the TF Serving op check on the written SavedModel.
        dtype: str. The SavedModel's precision, "float32" or "bfloat16" (see
            `load_for_export`). TFLite files are always converted from the float32 model
            (their own quantizations apply).
        jit_compile: bool or None. XLA-compile the model's forward in the signatures
            (ExportSpec); TF Serving then needs --xla_cpu_compilation_enabled=true on CPU.
            None: target_cpu's choice (off when cpu_streams > 1 is given).
        trim_padding: bool. Run each request only up to its batch's last attended position
            (rounded up to a multiple of 16); see ExportSpec.trim_padding.
        cpu_streams: int or None. Cut each block into this many streams for CPU serving with
            one intra-op and `cpu_streams` inter-op threads; see ExportSpec.cpu_streams.
            None: target_cpu's choice (1 when jit_compile is given true).
        overwrite: bool. Replace an earlier tfbert export in the version folder, and TFLite
            files that tfbert wrote.
        target_cpu: str. The serving CPU's kind, "auto" (this host's), "avx2", "avx512" or
            "amx" (tfbert/export/target_cpu.py): it picks the `tfbert.ops` form set the
            signatures are traced under and the jit_compile and cpu_streams left None. The
            record (assets.extra/tfbert_export.json) holds the kind, the form set and the
            values used.
        max_request_chars: int or None. The most characters of text one serving_default
            request may hold (ExportSpec.max_request_chars; 0: no limit); None: 1,000,000.

    Returns:
        {"export_dir" (the version folder written), "version" (its number), "replaced"
         (it held an earlier export), "task", "max_seq_length",
         "signatures": {name: {"inputs", "outputs"}},
         "serving_check": {"ok", "non_core_ops", "problems", "report"} (when check),
         "tflite": {file name: {"path", "bytes", "latency_ms", ...}} (when tflite)}.

    Example:
    >>> export_model("output/sentiment/model", "saved_models/sentiment",
    ...              tflite=("float32", "int8"))["export_dir"]  # doctest: +SKIP
    'saved_models/sentiment/1'
    """
    # (loaded when an export runs: see load_for_export)
    from tfbert.export.saved_model import export_saved_model, signature_summary
    from tfbert.export.streams import check_streams
    from tfbert.export.target_cpu import export_forms, export_settings
    from tfbert.ops import use_forms

    ownership.check_not_inputs([export_dir, *([tflite_dir] if tflite_dir else [])],
                               {"model_dir": model_dir}, "export_dir")
    kind, chosen = export_settings(target_cpu, jit_compile, cpu_streams)
    jit_compile, cpu_streams = chosen.jit_compile, chosen.cpu_streams
    model, vocab_file, spec, metadata = load_for_export(model_dir, max_seq_length, pair, dtype)
    spec = dataclasses.replace(spec, jit_compile=jit_compile, trim_padding=trim_padding,
                               cpu_streams=cpu_streams)  # (replace validates them)
    if max_request_chars is not None:
        spec = dataclasses.replace(spec, max_request_chars=max_request_chars)
    encoder_config = getattr(model, "encoder", model).config
    check_streams(encoder_config.num_attention_heads, encoder_config.intermediate_size,
                  cpu_streams)
    # Refusals come before anything is written (the lock file included), and again under the
    # model folder's lock, which the export holds until its last file is written.
    version_dir = version_folder(export_dir, overwrite)
    if tflite_dir is None:
        tflite_dir = os.path.join(os.path.dirname(version_dir), "tflite")
    kinds = ("ids", "text") if text_tflite else ("ids",)
    if tflite:
        # the converter loads only when TFLite files are asked for
        from tfbert.export.tflite import check_tflite_dir, check_tflite_model

        check_tflite_model(model, tuple(tflite))
        check_tflite_dir(tflite_dir, vocab_file, tuple(tflite), kinds, overwrite)
    with lock_model_folder(model_folder(version_dir)):
        version_dir = version_folder(export_dir, overwrite)
        replaced = is_tfbert_export(version_dir)
        if tflite:
            check_tflite_dir(tflite_dir, vocab_file, tuple(tflite), kinds, overwrite)
        with use_forms(export_forms(kind)) as forms:  # the signatures are traced under this set
            module, version_dir = export_saved_model(
                model, version_dir, vocab_file, spec, overwrite=overwrite,
                metadata={"source": os.path.abspath(model_dir), "dtype": dtype,
                          "target_cpu": kind, "forms": dataclasses.asdict(forms)})
        result: dict[str, Any] = {
            "export_dir": version_dir, "version": int(os.path.basename(version_dir)),
            "replaced": replaced, "task": spec.task, "max_seq_length": spec.seq_length,
            "dtype": dtype, "cpu_streams": cpu_streams, "jit_compile": jit_compile,
            "target_cpu": kind, "forms": forms.name,
            "signatures": signature_summary(module.signatures())}
        if check:
            from tfbert.export.check_serving import check_saved_model  # (as above)

            report = check_saved_model(version_dir)
            result["serving_check"] = {"ok": report.ok, "non_core_ops": report.non_core_ops,
                                       "problems": report.problems,
                                       "warnings": report.warnings, "report": report.format()}
            if not report.ok:
                logger.warning("TF Serving check failed:\n%s", report.format())
        if tflite:
            from tfbert.export.tflite import export_tflite  # (as above)

            if dtype != "float32":
                model = load_for_export(model_dir, max_seq_length, pair)[0]
            result["tflite"] = export_tflite(model, spec, vocab_file, tflite_dir,
                                             tuple(tflite), kinds=kinds, overwrite=overwrite)
    return result
