"""bench.common's FLOP counts against the matmuls in the traced graph, and its GEMM rate probe:
the figures `bench.bench_inference` divides latencies into."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import make_features, tiny_config

import tfbert
from bench import common
from tfbert.ops import use_forms


def graph_matmul_flops(graph: tf.Graph) -> int:
    """2 * m * k * n summed over the graph's MatMul and BatchMatMulV2 ops (batch dimensions
    broadcast), read off their static shapes and transpose / adjoint attributes."""
    total = 0
    for op in graph.get_operations():
        if op.type not in ("MatMul", "BatchMatMulV2"):
            continue
        a, b = (t.shape.as_list() for t in op.inputs[:2])
        first, second = (("transpose_a", "transpose_b") if op.type == "MatMul"
                         else ("adj_x", "adj_y"))
        m, k = (a[-1], a[-2]) if op.get_attr(first) else (a[-2], a[-1])
        n = b[-2] if op.get_attr(second) else b[-1]
        assert k == (b[-1] if op.get_attr(second) else b[-2])
        batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
        total += 2 * int(np.prod(batch, dtype=np.int64)) * m * k * n
    return total


@pytest.mark.parametrize("form_set", ["plain", "tensorflow_cpu"])
def test_classifier_forward_flops_match_the_graph(form_set):
    """The classifier forward's count, its last block at [CLS] only, equals the matmul FLOPs of
    the graph tfbert traces, in keras's own form and in the fused CPU forms (2-D projections,
    heads-first core)."""
    config = tiny_config(num_hidden_layers=3)
    batch, seq, classes = 2, 16, 3
    features = make_features(config, batch, seq)
    inputs = {k: tf.constant(features[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    with use_forms(form_set):
        model = tfbert.BertClassifier(tfbert.BertEncoder(config), num_classes=classes)
        graph = tf.function(lambda x: model(x, training=False)).get_concrete_function(
            inputs).graph
    expected = batch * common.classifier_forward_flops(
        config.hidden_size, config.num_hidden_layers, config.intermediate_size, seq, classes,
        last_layer_rows=1)
    assert graph_matmul_flops(graph) == expected


def test_bert_base_classifier_forward_flops():
    """bert-base at 128 tokens: 12 layers of 1.862 GFLOP as the peers run them (22.35 GFLOP
    with the pooler and classifier), 20.80 with tfbert's last block at [CLS] only."""
    layer = 8 * 128 * 768**2 + 4 * 128**2 * 768 + 4 * 128 * 768 * 3072
    head = 2 * 768**2 + 4 * 768
    full = common.classifier_forward_flops(768, 12, 3072, 128, 2)
    assert full == 12 * layer + head
    assert full / 1e9 == pytest.approx(22.35, abs=0.01)
    last_at_cls = 4 * 128 * 768**2 + 4 * 768**2 + 4 * 128 * 768 + 4 * 768 * 3072
    ours = common.classifier_forward_flops(768, 12, 3072, 128, 2, last_layer_rows=1)
    assert ours == 11 * layer + last_at_cls + head
    assert ours / 1e9 == pytest.approx(20.80, abs=0.01)


@pytest.mark.parametrize("library", ["tensorflow", "numpy"])
def test_gemm_rate_is_a_rate(library, monkeypatch):
    """A small product's FLOP/s: 2 n^3 over the timed seconds (time.perf_counter faked to
    advance 1 ms per call, so the probe's arithmetic is checked exactly)."""
    clock = iter(range(10**6))
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(clock) * 1e-3)
    rate = common.gemm_rate(library, n=64, reps=2)
    per_run = 4 if library == "tensorflow" else 1  # matmul_peak_probe chains 4 products
    assert rate == pytest.approx(per_run * 2 * 64**3 / 1e-3)


def test_gemm_rate_names_an_unknown_library():
    with pytest.raises(ValueError, match="unknown GEMM library 'blas'"):
        common.gemm_rate("blas", n=8)


def test_inference_rates_against_the_ceiling():
    """bench_inference's rates: a row's executed FLOPs over its latency (tfbert's last block at
    [CLS] only, a peer's at every position), its share of the fastest GEMM of the run; only
    float32 rows at full length are rated."""
    from bench import bench_inference

    result = {"config": {"preset": "bert-base-chinese"},
              "gemm_peak_gflops": {"tensorflow-xla": 176.0, "numpy": 120.0},
              "rows": [
                  {"system": "tfbert SavedModel serve_ids b=32", "case": "b=32", "batch": 32,
                   "real_tokens": 128, "latency_ms": 5341.1},
                  {"system": "onnxruntime (default session) b=32", "case": "b=32",
                   "batch": 32, "real_tokens": 128, "latency_ms": 4509.7},
                  {"system": "onnxruntime (default session) b=1, 32 of 128 tokens",
                   "case": "b=1, 32 of 128 tokens", "batch": 1, "real_tokens": 32,
                   "latency_ms": 138.8},
                  {"system": "pytorch (transformers, eager) bfloat16 b=1", "case": "b=1",
                   "batch": 1, "real_tokens": 128, "latency_ms": 90.0},
                  {"system": "keras-hub (XLA) b=1", "case": "b=1", "batch": 1,
                   "real_tokens": 128, "error": "ImportError"}]}
    rated = bench_inference.add_rates(result)
    assert [row["system"] for row in rated] == ["tfbert SavedModel serve_ids b=32",
                                                "onnxruntime (default session) b=32"]
    ours, ort = rated
    assert ours["gflops_per_s"] == pytest.approx(32 * 20.80 / 5.3411, abs=0.15)
    assert ort["gflops_per_s"] == pytest.approx(32 * 22.35 / 4.5097, abs=0.15)
    assert ort["of_gemm_peak"] == pytest.approx(ort["gflops_per_s"] / 176.0, abs=1e-3)
    given = bench_inference.add_rates(result, peak_gflops=200.0)
    assert given[1]["of_gemm_peak"] == pytest.approx(ort["gflops_per_s"] / 200.0, abs=1e-3)
