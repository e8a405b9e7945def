"""Which TF Text ops each TF Serving release can run (data for `tfbert.export.check_serving`).

TF Serving links TF Text's kernels into `tensorflow_model_server`: TF Serving 2.12 to 2.19 bundle
TF Text 2.12.1, TF Serving 2.20 bundles TF Text 2.20.0. A SavedModel that calls a TF Text op the
bundled release lacks fails to load there ("Op type not registered").

How the lists below were derived (measured, not guessed):
  1. `pip download tensorflow-text==2.12.1 --no-deps` (and 2.20.0), cp311 manylinux wheels.
  2. A clean venv per release with the matching core TensorFlow (`tensorflow-cpu==2.12.1` +
     `tensorflow-text==2.12.1 --no-deps`; `tensorflow-cpu==2.20.0` + `tensorflow-text==2.20.0`).
  3. In each venv, `python tfbert/export/tf_text_ops.py` (the `dump_registered_ops` function
     below, which needs only tensorflow): read TensorFlow's op registry (`TF_GetAllOpList`),
     `load_op_library` every `tensorflow_text/python/**/_*.so` of the installed wheel, read the
     registry again. The TF Text ops are the names the .so files added. The same run also records
     the core registry (names and attribute names), which data_tools/make_serving_op_tables.py
     turns into the tables that `tf_core_ops.py` reads.
TF Text 2.21.1 (this project's runtime) registers the same 38 ops as 2.20.0, and every TF Text
op has the same attribute names in 2.12.1, 2.20.0 and 2.21.1 (checked with the same dumps).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import sys

# TF Serving minor version range -> the TF Text release its model server bundles.
TF_SERVING_TF_TEXT: tuple[tuple[tuple[int, int], tuple[int, int], str], ...] = (
    ((2, 12), (2, 19), "2.12.1"),
    ((2, 20), (2, 20), "2.20.0"),
)

_TF_TEXT_2_12_1 = (
    "CaseFoldUTF8", "ConstrainedSequence", "FastBertNormalize",
    "FastWordpieceTokenizeWithOffsets", "FindSourceOffsets", "MaxSpanningTree", "NormalizeUTF8",
    "NormalizeUTF8WithOffsetsMap", "PhraseTokenize", "RegexSplitWithOffsets", "RougeL",
    "SentenceFragments", "SentenceFragmentsV2", "SentencepieceDetokenizeOp",
    "SentencepieceIdToStringOp", "SentencepieceOp", "SentencepieceStringToIdOp",
    "SentencepieceTokenizeOp", "SentencepieceTokenizeWithOffsetsOp", "SentencepieceVocabSizeOp",
    "SplitMergeTokenizeWithOffsets", "TFText>BoiseTagsToOffsets", "TFText>ByteSplitByOffsets",
    "TFText>ByteSplitWithOffsets", "TFText>FastSentencepieceDetokenize",
    "TFText>FastSentencepieceTokenize", "TFText>FastWordpieceDetokenize",
    "TFText>NgramsStringJoin", "TFText>OffsetsToBoiseTags", "TFText>PhraseDetokenize",
    "TFText>WhitespaceTokenizeWithOffsetsV2", "TokenizerFromLogits",
    "UnicodeScriptTokenizeWithOffsets", "WhitespaceTokenizeWithOffsets",
    "WordpieceTokenizeWithOffsets",
)
# 2.20.0 = 2.12.1 plus three ops (measured the same way).
_TF_TEXT_2_20_0 = _TF_TEXT_2_12_1 + (
    "TFText>RoundRobinGenerateMasks", "TFText>RoundRobinTrim", "TFText>Utf8Binarize",
)

TF_TEXT_OPS: dict[str, frozenset[str]] = {
    "2.12.1": frozenset(_TF_TEXT_2_12_1),
    "2.20.0": frozenset(_TF_TEXT_2_20_0),
}

# Every op name any recorded TF Text release registers (to tell TF Text ops from unknown ones).
ALL_TF_TEXT_OPS: frozenset[str] = frozenset().union(*TF_TEXT_OPS.values())


def tf_text_release_for_serving(serving_version: str) -> str:
    """The TF Text release bundled in a TF Serving version.

    Args:
        serving_version: str. A TF Serving version such as "2.12", "2.16.1" or "2.20.0".

    Returns:
        The TF Text version string, a key of `TF_TEXT_OPS`.
    """
    parts = serving_version.split(".")
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError) as e:
        raise ValueError(f"tf_text_ops.py: serving version {serving_version!r} is not "
                         "MAJOR.MINOR[.PATCH]") from e
    for low, high, release in TF_SERVING_TF_TEXT:
        if low <= major_minor <= high:
            return release
    known = ", ".join(f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}" for lo, hi, _ in TF_SERVING_TF_TEXT)
    raise ValueError(f"tf_text_ops.py: no recorded TF Text release for TF Serving "
                     f"{serving_version!r}; recorded ranges: {known}")


def registered_ops() -> dict[str, list[str]]:
    """{op name: sorted attribute names} of every op registered in this process's TensorFlow.

    TensorFlow has no public API for its op registry (`tf.raw_ops` holds only the ops that have
    Python wrappers: no `_Arg`, no test ops, none that `tf.load_op_library` adds), so this reads
    it through the C API's `TF_GetAllOpList` as bound in `tensorflow.python.client`. Checked on
    tensorflow 2.12.1, 2.20.0 and 2.21.0.
    """
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api

    buf = c_api.TF_GetAllOpList()
    try:
        data = c_api.TF_GetBuffer(buf)
    finally:
        c_api.TF_DeleteBuffer(buf)
    return {op.name: sorted(a.name for a in op.attr)
            for op in op_def_pb2.OpList.FromString(data).op}


def dump_registered_ops() -> dict:
    """Reads the op registry of the installed TensorFlow before and after loading TF Text's .so
    files. This is how the lists in this module and the tables of `tf_core_ops.py` were made
    (data_tools/make_serving_op_tables.py writes those from its output); it needs only
    `tensorflow` and an installed `tensorflow-text` wheel (its Python package is not imported, so
    TF Text's optional Python dependencies need not be installed).

    Returns:
        dict with `tensorflow`, `tensorflow_text` (versions), `tf_text_ops` and `core_ops`
        (each {op name: sorted attribute names}).
    """
    # TensorFlow loads only to list the installed ops; the op tables need none.
    import tensorflow as tf

    core = registered_ops()
    spec = importlib.util.find_spec("tensorflow_text")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("tf_text_ops.py: tensorflow-text is not installed")
    base = list(spec.submodule_search_locations)[0]
    for so in sorted(glob.glob(os.path.join(base, "python", "**", "_*.so"), recursive=True)):
        tf.load_op_library(so)
    text_ops = {name: attrs for name, attrs in registered_ops().items() if name not in core}
    version = "unknown"
    for meta in glob.glob(os.path.join(base, "..", "tensorflow_text-*.dist-info", "METADATA")):
        with open(meta, encoding="utf-8") as f:
            version = next((line.split()[1] for line in f if line.startswith("Version: ")), version)
    return {"tensorflow": tf.__version__, "tensorflow_text": version,
            "tf_text_ops": text_ops, "core_ops": core}


if __name__ == "__main__":
    json.dump(dump_registered_ops(), sys.stdout, indent=0, sort_keys=True)
