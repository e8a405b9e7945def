"""TF Serving requests against exported SavedModels, without a model server.

The REST payloads are the ones in docs/serving.md (read from the file), decoded into tensors the
way TF Serving's JSON layer does it (tensorflow_serving/util/json_tensor.cc: row format
`instances`, columnar `inputs`, bare values for single-input signatures, `{"b64": ...}` for
binary strings, integers checked for int inputs), run through the loaded SavedModel, and the
response encoded as TF Serving writes it (`predictions` / `outputs`). The gRPC request is a
`tensorflow_serving.apis.predict_pb2.PredictRequest`, serialized and parsed, its tensors
converted with `tf.make_ndarray` as the model server does.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from export_test_utils import SEQ, exported, load_signatures

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "serving.md")


# --- TF Serving's JSON <-> tensor rules -----------------------------------------------------------


class ServingError(ValueError):
    """What TF Serving answers with HTTP 400 ({"error": ...})."""


def _to_array(value, dtype: tf.DType, name: str) -> np.ndarray:
    """A JSON value (nested lists) as a tensor of the signature's dtype."""
    def leaf(x):
        if dtype == tf.string:
            if isinstance(x, dict):
                if set(x) != {"b64"}:
                    raise ServingError(f"JSON object for '{name}' must be {{\"b64\": ...}}")
                return base64.b64decode(x["b64"])
            if not isinstance(x, str):
                raise ServingError(f"JSON value {x!r} is not a string for DT_STRING '{name}'")
            return x.encode("utf-8")
        if isinstance(x, bool) or not isinstance(x, int):
            raise ServingError(f"JSON value {x!r} is not an integer for {dtype.name} '{name}'")
        if dtype == tf.int32 and not -2**31 <= x < 2**31:
            raise ServingError(f"JSON value {x} is out of range for DT_INT32 '{name}'")
        return x

    def walk(x):
        return [walk(v) for v in x] if isinstance(x, list) else leaf(x)

    array = np.array(walk(value), dtype=object if dtype == tf.string else dtype.as_numpy_dtype)
    if array.dtype == object and dtype != tf.string:
        raise ServingError(f"input '{name}' has a ragged shape")
    return array


def decode_rest_request(body: str, signatures) -> tuple[str, dict[str, np.ndarray]]:
    """(signature name, {input: array}) from a :predict request body."""
    request = json.loads(body)
    name = request.get("signature_name", "serving_default")
    if name not in signatures:
        raise ServingError(f"Serving signature name: \"{name}\" not found in signature def")
    specs = signatures[name].structured_input_signature[1]  # {input: TensorSpec}
    if ("instances" in request) == ("inputs" in request):
        raise ServingError("JSON object must have exactly one of 'instances' or 'inputs'")
    if "instances" in request:  # row format: one entry per example
        instances = request["instances"]
        if not isinstance(instances, list) or not instances:
            raise ServingError("'instances' must be a non-empty JSON array")
        if all(isinstance(x, dict) and "b64" not in x for x in instances):
            columns = {}
            for key in specs:
                if any(key not in x for x in instances):
                    raise ServingError(f"Missing named input '{key}' in 'instances'")
                columns[key] = [x[key] for x in instances]
            extra = set().union(*instances) - set(specs)
            if extra:
                raise ServingError(f"Unknown input(s) {sorted(extra)} in 'instances'")
        elif len(specs) == 1:
            columns = {next(iter(specs)): instances}
        else:
            raise ServingError("'instances' elements must be objects naming every input")
    else:  # columnar
        inputs = request["inputs"]
        if isinstance(inputs, dict) and "b64" not in inputs:
            columns = inputs
            if set(columns) != set(specs):
                raise ServingError(f"'inputs' names {sorted(columns)} != {sorted(specs)}")
        elif len(specs) == 1:
            columns = {next(iter(specs)): inputs}
        else:
            raise ServingError("'inputs' must be an object naming every input")
    arrays = {key: _to_array(value, specs[key].dtype, key) for key, value in columns.items()}
    for key, array in arrays.items():
        if not specs[key].shape.is_compatible_with(array.shape):
            raise ServingError(f"input '{key}' has shape {array.shape}, signature wants "
                               f"{specs[key].shape}")
    return name, arrays


def _json_value(array, name: str):
    """A tensor as TF Serving writes it: nested lists; strings as text, or base64 objects for
    outputs whose name ends in "_bytes"."""
    value = np.asarray(array).tolist()

    def convert(x):
        if isinstance(x, list):
            return [convert(v) for v in x]
        if isinstance(x, bytes):
            return {"b64": base64.b64encode(x).decode()} if name.endswith("_bytes") else \
                x.decode("utf-8")
        return x

    return convert(value)


def encode_rest_response(outputs: dict[str, np.ndarray], row_format: bool) -> str:
    """The response body TF Serving writes for these output tensors."""
    if not row_format:
        values = {k: _json_value(v, k) for k, v in outputs.items()}
        return json.dumps({"outputs": next(iter(values.values())) if len(values) == 1
                           else values}, ensure_ascii=False)
    batch = {v.shape[0] for v in outputs.values()}
    if len(batch) != 1:
        raise ServingError("row format needs every output to have the same 0th dimension")
    predictions = []
    for i in range(batch.pop()):
        row = {k: _json_value(v[i], k) for k, v in outputs.items()}
        predictions.append(next(iter(row.values())) if len(row) == 1 else row)
    return json.dumps({"predictions": predictions}, ensure_ascii=False)


def predict(signatures, body: str) -> tuple[dict[str, np.ndarray], dict]:
    """Decodes a REST body, runs the signature, returns (output arrays, response JSON)."""
    name, arrays = decode_rest_request(body, signatures)
    outputs = {k: v.numpy() for k, v in signatures[name](
        **{k: tf.constant(v) for k, v in arrays.items()}).items()}
    return outputs, json.loads(encode_rest_response(outputs, "instances" in json.loads(body)))


def doc_payloads() -> list[tuple[str, str]]:
    """(model name, JSON body) of every `curl ... :predict -d '...'` in docs/serving.md."""
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"/v1/models/(\w+):predict -d '(\{.*\})'", text)
    assert len(found) >= 4, "docs/serving.md lost its REST examples"
    return found


def _signatures(export_dir: str) -> dict:
    serving_default, serve_ids = load_signatures(export_dir)
    return {"serving_default": serving_default, "serve_ids": serve_ids}


# --- tests ----------------------------------------------------------------------------------------


def test_docs_rest_payloads_run_like_tf_serving(export_root, chinese_vocab_file):
    kinds = {"sentiment": "classification", "qa": "qa"}
    for model_name, body in doc_payloads():
        signatures = _signatures(exported(kinds[model_name], export_root, chinese_vocab_file)[1])
        request = json.loads(body)
        if request.get("signature_name") == "serve_ids":
            # The docs show 8 positions; the test model's max_seq_length is SEQ.
            for instance in request["instances"]:
                for key, value in instance.items():
                    instance[key] = value + [0] * (SEQ - len(value))
            body = json.dumps(request)
        name, arrays = decode_rest_request(body, signatures)
        outputs, response = predict(signatures, body)
        direct = signatures[name](**{k: tf.constant(v) for k, v in arrays.items()})
        for key, value in direct.items():
            np.testing.assert_array_equal(outputs[key], value.numpy())
        batch = len(next(iter(arrays.values())))
        if "instances" in request:
            assert len(response["predictions"]) == batch
            first = response["predictions"][0]
        else:
            first = {k: v[0] for k, v in response["outputs"].items()}
        if model_name == "sentiment":
            assert first["labels"] in ("负面", "正面") and first["label_ids"] in (0, 1)
            assert sum(first["probabilities"]) == pytest.approx(1.0, abs=1e-5)
        elif name == "serving_default":  # QA: the answer is a piece of the context
            context = arrays["text_b"][0].decode()
            assert first["answer_text"] == context[first["answer_start"]:first["answer_end"]]


def test_rest_formats_agree_and_bad_requests_fail(export_root, chinese_vocab_file):
    signatures = _signatures(exported("classification", export_root, chinese_vocab_file)[1])
    texts = ["这家酒店的服务很好，房间也干净。", "质量太差了，不推荐购买。", ""]
    bodies = [
        json.dumps({"instances": [{"text": t} for t in texts]}, ensure_ascii=False),
        json.dumps({"instances": texts}, ensure_ascii=False),
        json.dumps({"inputs": {"text": texts}}, ensure_ascii=False),
        json.dumps({"inputs": texts}),
        json.dumps({"instances": [{"text": {"b64": base64.b64encode(t.encode()).decode()}}
                                  for t in texts]}),
    ]
    results = [predict(signatures, body) for body in bodies]
    for outputs, _ in results[1:]:
        for key, value in results[0][0].items():
            np.testing.assert_array_equal(outputs[key], value)
    rows, columns = results[0][1]["predictions"], results[2][1]["outputs"]
    assert [r["labels"] for r in rows] == columns["labels"]
    assert [r["label_ids"] for r in rows] == columns["label_ids"]
    for bad, message in [
            ({"instances": [{"txt": "好"}]}, "Missing named input 'text'"),
            ({"instances": [{"text": 3}]}, "not a string"),
            ({"inputs": {"text": ["好"]}, "instances": ["好"]}, "exactly one"),
            ({"signature_name": "nope", "inputs": ["好"]}, "not found"),
            ({"signature_name": "serve_ids", "inputs": {
                "input_ids": [[1.5] * SEQ], "input_mask": [[1] * SEQ],
                "segment_ids": [[0] * SEQ]}}, "not an integer"),
            ({"signature_name": "serve_ids", "inputs": {
                "input_ids": [[1] * 3], "input_mask": [[1] * 3], "segment_ids": [[0] * 3]}},
             "has shape")]:
        with pytest.raises(ServingError, match=message):
            decode_rest_request(json.dumps(bad), signatures)


def test_grpc_predict_request_round_trip(export_root, chinese_vocab_file):
    predict_pb2 = pytest.importorskip("tensorflow_serving.apis.predict_pb2")
    signatures = _signatures(exported("qa", export_root, chinese_vocab_file)[1])
    questions = ["首都是哪里？", "谁在讲话？"]
    contexts = ["北京是中华人民共和国的首都。", "国家主席江泽民发表了新年讲话。"]
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "qa"
    request.model_spec.signature_name = "serving_default"
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(questions))
    request.inputs["text_b"].CopyFrom(tf.make_tensor_proto(contexts))
    received = predict_pb2.PredictRequest.FromString(request.SerializeToString())
    # The model server: TensorProto -> tensor, run the signature, tensor -> TensorProto.
    signature = signatures[received.model_spec.signature_name]
    inputs = {k: tf.make_ndarray(v) for k, v in received.inputs.items()}
    assert inputs["text"].tolist() == [q.encode() for q in questions]
    outputs = signature(**{k: tf.constant(v) for k, v in inputs.items()})
    response = predict_pb2.PredictResponse()
    response.model_spec.CopyFrom(received.model_spec)
    for key, value in outputs.items():
        response.outputs[key].CopyFrom(tf.make_tensor_proto(value))
    client = predict_pb2.PredictResponse.FromString(response.SerializeToString())
    direct = signature(text=tf.constant(questions), text_b=tf.constant(contexts))
    for key, value in direct.items():
        np.testing.assert_array_equal(tf.make_ndarray(client.outputs[key]), value.numpy())
    answers = tf.make_ndarray(client.outputs["answer_text"])
    starts = tf.make_ndarray(client.outputs["answer_start"])
    ends = tf.make_ndarray(client.outputs["answer_end"])
    for context, answer, s, e in zip(contexts, answers, starts, ends, strict=True):
        assert answer.decode() == context[s:e] and e > s >= 0


@pytest.mark.slow
def test_saved_model_cli_run(export_root, chinese_vocab_file, tmp_path):
    """`saved_model_cli run` (started from a Python that imported tensorflow_text, as
    docs/serving.md shows) gives the outputs of the loaded SavedModel."""
    export_dir = exported("classification", export_root, chinese_vocab_file)[1]
    command = [sys.executable, "-c", "import tensorflow_text; from tensorflow.python.tools."
               "saved_model_cli import main; main()", "run", "--dir", export_dir, "--tag_set",
               "serve", "--signature_def", "serving_default", "--input_exprs",
               'text=["质量太差了", "很好"]', "--outdir", str(tmp_path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    direct = _signatures(export_dir)["serving_default"](text=tf.constant(["质量太差了", "很好"]))
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), direct["logits"].numpy(),
                               atol=1e-6)
    assert np.load(tmp_path / "labels.npy", allow_pickle=True).tolist() == \
        direct["labels"].numpy().tolist()


OLD_TF_SCRIPT = r"""
import glob, importlib.util, json, os, sys
import tensorflow as tf
from tensorflow.python.framework import load_library
# TF Text's op libraries, without importing tensorflow_text (whose Python deps may be missing).
base = list(importlib.util.find_spec("tensorflow_text").submodule_search_locations)[0]
for so in sorted(glob.glob(os.path.join(base, "python", "**", "_*.so"), recursive=True)):
    load_library.load_op_library(so)
path, inputs = json.loads(sys.argv[1])
# The TF1 session loader: what TF Serving's C++ SavedModelBundle does.
with tf.compat.v1.Session(graph=tf.Graph()) as sess:
    meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
    sig = meta.signature_def["serving_default"]
    out = sess.run({k: v.name for k, v in sig.outputs.items()},
                   {sig.inputs[k].name: v for k, v in inputs.items()})
print(json.dumps({"tf": tf.__version__, "out": {k: v.tolist() if v.dtype != object else
                  [x.decode() for x in v.ravel()] for k, v in out.items()}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["classification", "ner", "qa"])
def test_exports_load_in_the_tensorflow_of_old_tf_serving(kind, export_root, chinese_vocab_file):
    """TF Serving 2.12's core: load the export with TF 2.12.1 + TF Text 2.12.1 (and 2.20.0).

    Needs interpreters of such environments, e.g. `python3.11 -m venv tf212 && tf212/bin/pip
    install tensorflow-cpu==2.12.1 && tf212/bin/pip install --no-deps tensorflow-text==2.12.1`,
    listed in TFBERT_OLD_TF_PYTHONS (colon-separated); skipped otherwise.
    """
    pythons = [p for p in os.environ.get("TFBERT_OLD_TF_PYTHONS", "").split(":") if p]
    if not pythons:
        pytest.skip("set TFBERT_OLD_TF_PYTHONS to old-TF interpreters to run this check")
    export_dir = exported(kind, export_root, chinese_vocab_file)[1]
    texts = ["北京欢迎你。", "", "中华人民共和国" * 10]
    inputs = {"text": texts, **({"text_b": texts[::-1]} if kind == "qa" else {})}
    here = _signatures(export_dir)["serving_default"](
        **{k: tf.constant(v) for k, v in inputs.items()})
    for python in pythons:
        proc = subprocess.run([python, "-c", OLD_TF_SCRIPT, json.dumps([export_dir, inputs])],
                              capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        old = json.loads(proc.stdout.strip().splitlines()[-1])
        for name, value in here.items():
            if value.dtype == tf.string:
                assert old["out"][name] == [x.decode() for x in value.numpy().ravel()], name
            else:
                np.testing.assert_allclose(np.asarray(old["out"][name]), value.numpy(),
                                           atol=1e-5, err_msg=f"TF {old['tf']}: {name}")
