"""--target_cpu: /proc/cpuinfo parsing, the kind it resolves to, the choices an export makes for
each kind (written to the export record), and the benchmarks' ISA record and AVX2 emulation."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from tfbert.errors import UserError
from tfbert.export import target_cpu
from tfbert.export.target_cpu import parse_cpuinfo, resolve_target_cpu

# Shortened /proc/cpuinfo texts of the two development hosts (two processors each)
EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni vaes vpclmulqdq
bugs\t\t: sysret_ss_attrs

processor\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2
"""
SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse2 avx avx2 avx512f avx512dq avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""
SKYLAKE = "model name\t: Intel(R) Xeon(R) Gold 6148\nflags\t\t: avx avx2 avx512f avx512dq\n"


def test_parse_cpuinfo_and_the_isa_record():
    epyc = parse_cpuinfo(EPYC)
    assert epyc.model_name == "AMD EPYC"
    assert epyc.flags == frozenset("fpu sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni "
                                   "vaes vpclmulqdq".split())  # the first processor's line
    assert epyc.record() == {"model_name": "AMD EPYC", "kind": "avx2", "flags": {
        "avx2": True, "avx512f": False, "avx512_vnni": False, "avx512_bf16": False,
        "amx_bf16": False, "amx_int8": False, "amx_tile": False}}
    spr = parse_cpuinfo(SAPPHIRE_RAPIDS)
    assert spr.model_name == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert spr.kind == "amx" and all(spr.record()["flags"].values())
    assert parse_cpuinfo(SKYLAKE).kind == "avx512"
    empty = parse_cpuinfo("")  # no cpuinfo (not Linux): no flags, the avx2 kind
    assert (empty.model_name, empty.flags, empty.kind) == ("", frozenset(), "avx2")


def test_resolve_target_cpu():
    epyc, spr = parse_cpuinfo(EPYC), parse_cpuinfo(SAPPHIRE_RAPIDS)
    assert resolve_target_cpu("auto", epyc) == "avx2"
    assert resolve_target_cpu("auto", spr) == "amx"
    assert resolve_target_cpu("auto") == target_cpu.host_cpu().kind
    for kind in ("avx2", "avx512", "amx"):
        assert resolve_target_cpu(kind, epyc) == kind == resolve_target_cpu(kind, spr)
    with pytest.raises(UserError, match="target_cpu 'avx512_vnni' is not one of auto, avx2, "
                                        "avx512, amx"):
        resolve_target_cpu("avx512_vnni")
    with pytest.raises(UserError, match="target_cpu 'auto' is not one of avx2, avx512, amx"):
        target_cpu.export_defaults("auto")


def test_target_cpu_flag_values(capsys):
    from tfbert.export.__main__ import build_parser

    base = ["--model_dir=m", "--export_dir=e"]
    args = build_parser().parse_args(base)
    assert (args.target_cpu, args.jit_compile, args.cpu_streams) == ("auto", None, None)
    args = build_parser().parse_args([*base, "--target_cpu=avx2", "--no-jit_compile"])
    assert (args.target_cpu, args.jit_compile) == ("avx2", False)
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*base, "--target_cpu=sse4"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'sse4'" in capsys.readouterr().err


def test_export_settings_the_callers_values_win():
    epyc = parse_cpuinfo(EPYC)
    for kind in ("auto", "avx2", "avx512", "amx"):
        resolved, chosen = target_cpu.export_settings(kind, cpu=epyc)
        assert resolved == ("avx2" if kind == "auto" else kind)
        assert chosen == target_cpu.export_defaults(resolved)
        _, given = target_cpu.export_settings(kind, jit_compile=True, cpu=epyc)
        assert (given.jit_compile, given.cpu_streams) == (True, 1)
        _, given = target_cpu.export_settings(kind, cpu_streams=2, cpu=epyc)
        assert (given.jit_compile, given.cpu_streams) == (False, 2)
        _, given = target_cpu.export_settings(kind, jit_compile=False, cpu=epyc)
        assert (given.jit_compile, given.cpu_streams) == (False, chosen.cpu_streams)
        assert given.forms == chosen.forms
    # the AMX host's measured choice: every fused form, no XLA, no streams
    assert target_cpu.export_defaults("amx") == target_cpu.TargetDefaults(
        forms="tensorflow_cpu", jit_compile=False, cpu_streams=1)


def _tiny_classifier(tmp_path) -> str:
    import keras

    import tfbert

    vocab = tmp_path / "vocab.txt"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"天气很好我们去公园"]
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    keras.utils.set_random_seed(0)
    config = tfbert.BertConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=16)
    model_dir = str(tmp_path / "model")
    tfbert.save_pretrained(tfbert.BertClassifier(tfbert.BertEncoder(config), num_classes=2),
                           model_dir, vocab_file=str(vocab),
                           metadata={"task": "classification", "labels": ["a", "b"],
                                     "max_seq_length": 16})
    return model_dir


def _record(export_dir: str) -> dict:
    with open(os.path.join(export_dir, "assets.extra", "tfbert_export.json"),
              encoding="utf-8") as f:
        return json.load(f)


def test_the_kinds_choice_is_written_to_the_export_record(tmp_path, capsys):
    """--target_cpu=avx2 through the command line: the record and the summary line hold the
    kind, its form set (every field) and the jit_compile / cpu_streams it chose."""
    from tfbert.export.__main__ import main
    from tfbert.ops import FORM_SETS

    out = str(tmp_path / "saved_models" / "avx2" / "1")
    assert main([f"--model_dir={_tiny_classifier(tmp_path)}", f"--export_dir={out}",
                 "--target_cpu=avx2"]) == 0
    chosen = target_cpu.export_defaults("avx2")
    record = _record(out)
    assert record["target_cpu"] == "avx2"
    assert record["forms"] == dataclasses.asdict(FORM_SETS[chosen.forms])
    assert (record["jit_compile"], record["cpu_streams"]) == (chosen.jit_compile,
                                                              chosen.cpu_streams)
    assert (f"\n  for avx2 CPUs: forms {chosen.forms}, jit_compile {chosen.jit_compile}, "
            f"cpu_streams {chosen.cpu_streams}\n") in capsys.readouterr().out


@pytest.mark.slow
def test_every_kinds_export_gives_the_same_logits(tmp_path):
    """The exports for each kind, and with the kind's choice overridden, give the same logits
    through `serving_default`, and each record says what it used."""
    import numpy as np
    import tensorflow as tf

    from tfbert.export import export_model

    model_dir = _tiny_classifier(tmp_path)
    logits = []
    for i, (kind, given) in enumerate((("amx", {}), ("avx512", {}), ("avx2", {}),
                                       ("avx2", {"jit_compile": True}),
                                       ("avx2", {"cpu_streams": 2}))):
        out = str(tmp_path / "saved_models" / f"v{i}" / "1")
        result = export_model(model_dir, out, target_cpu=kind, check=False, **given)
        _, want = target_cpu.export_settings(kind, **given)
        assert (result["target_cpu"], result["forms"]) == (kind, want.forms)
        record = _record(out)
        assert (record["jit_compile"], record["cpu_streams"]) == (want.jit_compile,
                                                                  want.cpu_streams)
        serve = tf.saved_model.load(out).signatures["serving_default"]
        logits.append(serve(text=tf.constant(["天气很好", "我们去公园"]))["logits"].numpy())
    for other in logits[1:]:
        np.testing.assert_allclose(other, logits[0], atol=1e-5)


def test_bench_isa_record_and_avx2_emulation(monkeypatch):
    from bench import common

    for key in (*common.EMULATE_AVX2_ENV, "XLA_FLAGS", common.EMULATED_ENV):
        monkeypatch.delenv(key, raising=False)
    record = common.isa_record(SAPPHIRE_RAPIDS)
    assert (record["kind"], record["effective_kind"], record["emulated"]) == ("amx", "amx",
                                                                              None)
    assert record["flags"]["amx_tile"] is True and "emulation" not in record
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")  # a setting already made is kept
    assert common.emulate_avx2() == {
        "ONEDNN_MAX_CPU_ISA": "AVX2", "TF_ENABLE_ONEDNN_OPTS": "1",
        "XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_cpu_max_isa=AVX2",
        common.EMULATED_ENV: "avx2"}
    record = common.isa_record(SAPPHIRE_RAPIDS)
    assert (record["kind"], record["effective_kind"], record["emulated"]) == ("amx", "avx2",
                                                                              "avx2")
    assert record["emulation"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    # the record says what the emulation does not reach (docs/performance.md, "Emulating an
    # AVX2 host"): XLA's dots, and the peers outside TensorFlow
    limits = record["emulation_limits"]
    assert all(name in limits for name in ("XLA", "--xla_cpu_max_isa", "PyTorch",
                                           "ONNX Runtime")), limits
