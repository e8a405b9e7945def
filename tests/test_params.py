"""tfbert.params: analytic counts against published references, HF's BertModel and built
Keras models; the command line."""

from __future__ import annotations

import importlib.util

import pytest

from tfbert import BertConfig, BertEncoder, BertPretrainer, count_parameters
from tfbert.config import PRESETS
from tfbert.params import format_table, main

# DESIGN.md "Reference facts": BertModel with pooler.
REFERENCE_TOTALS = {
    "bert-base-chinese": 102_267_648,
    "bert-base-uncased": 109_482_240,
    "bert-large-uncased": 335_141_888,
    "bert-mini": 11_170_560,
}


@pytest.mark.parametrize("name", sorted(REFERENCE_TOTALS))
def test_reference_totals(name):
    assert count_parameters(name)["total"] == REFERENCE_TOTALS[name]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_closed_form(name):
    """The breakdown adds up, and equals BERT's closed form, for every preset."""
    c = BertConfig.from_preset(name)
    h, i, v, layers = c.hidden_size, c.intermediate_size, c.vocab_size, c.num_hidden_layers
    counts = count_parameters(c)
    per_layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    embeddings = (v + c.max_position_embeddings + c.type_vocab_size) * h + 2 * h
    assert counts["per_layer"] == per_layer
    assert counts["embeddings"] == embeddings
    assert counts["encoder"] == layers * per_layer
    assert counts["pooler"] == h * h + h
    assert counts["total"] == embeddings + layers * per_layer + h * h + h
    assert counts["total_without_pooler"] == counts["total"] - h * h - h
    # biases and LayerNorm betas: embeddings LN; per layer Q/K/V/output, LN, FFN in/out, LN; pooler
    biases = h + layers * (4 * h + h + i + h + h) + h
    assert counts["biases"] == biases
    assert counts["total_without_biases"] == counts["total"] - biases
    assert counts["mlm_head"] == h * h + h + 2 * h + v
    assert counts["nsp_head"] == 2 * h + 2
    assert counts["pretrainer_total"] == counts["total"] + counts["mlm_head"] + 2 * h + 2
    # Per-component detail, weight/bias split.
    assert counts["embeddings/word_embeddings"] == v * h
    assert counts["embeddings/LayerNorm/weight"] == counts["embeddings/LayerNorm/bias"] == h
    assert counts["layer/attention/self/query/weight"] == h * h
    assert counts["layer/attention/self/query/bias"] == h
    assert counts["layer/intermediate/dense"] == h * i + i
    assert counts["layer/output/dense/bias"] == h
    layer_keys = [k for k in counts if k.startswith("layer/") and
                  not k.endswith(("/weight", "/bias"))]
    assert len(layer_keys) == 8 and sum(counts[k] for k in layer_keys) == per_layer
    for key in layer_keys:
        assert counts[key] == counts[key + "/weight"] + counts[key + "/bias"]


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers is not installed")
def test_every_preset_matches_hugging_face():
    """Counts from HF's own BertModel / BertForPreTraining (built on torch's meta device, so
    no memory is allocated) for every preset."""
    import torch
    import transformers

    for name in PRESETS:
        c = BertConfig.from_preset(name)
        hf_config = transformers.BertConfig(
            vocab_size=c.vocab_size, hidden_size=c.hidden_size,
            num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
            intermediate_size=c.intermediate_size,
            max_position_embeddings=c.max_position_embeddings,
            type_vocab_size=c.type_vocab_size)
        with torch.device("meta"):
            model = transformers.BertModel(hf_config)
            pretraining = transformers.BertForPreTraining(hf_config)
        counts = count_parameters(c)
        assert counts["total"] == sum(p.numel() for p in model.parameters()), name
        assert counts["pretrainer_total"] == sum(
            p.numel() for p in pretraining.parameters()), name


@pytest.mark.parametrize("name", ["bert-tiny", "bert-mini"])
def test_built_encoder_count_params(name):
    encoder = BertEncoder(BertConfig.from_preset(name))
    assert encoder.count_params() == count_parameters(name)["total"]


def test_built_pretrainer_count_params():
    config = BertConfig.from_preset("bert-tiny")
    model = BertPretrainer(BertEncoder(config))
    assert model.count_params() == count_parameters(config)["pretrainer_total"]


@pytest.mark.slow
def test_built_base_encoder_count_params():
    encoder = BertEncoder(BertConfig.from_preset("bert-base-chinese"))
    assert encoder.count_params() == 102_267_648


def test_command_line(capsys, tmp_path):
    assert main(["bert-base-chinese"]) == 0
    out = capsys.readouterr().out
    assert "total (BertModel with pooler)" in out and "102,267,648" in out
    assert "layer/attention/self/query" in out and "589,824" in out

    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PRESETS) and "335,141,888" in out

    path = tmp_path / "config.json"
    BertConfig.from_preset("bert-mini").to_json_file(str(path), flavor="hf")
    assert main([str(path)]) == 0
    assert "11,170,560" in capsys.readouterr().out

    assert main(["no-such-model"]) == 2
    assert "neither a preset" in capsys.readouterr().err


def test_format_table_shares():
    table = format_table("bert-base-chinese")
    assert table.splitlines()[0].startswith("bert-base-chinese: L=12 H=768")
    assert "100.00%" in table
    with pytest.raises(TypeError, match="needs a BertConfig, preset name or config path"):
        count_parameters(42)
