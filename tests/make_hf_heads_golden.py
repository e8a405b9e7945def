"""Makes the Hugging Face fine-tuned-head fixtures with transformers + PyTorch (CPU).

Run from the repo root (needs torch and transformers; the tests that read the files do not):

    .venv/bin/python tests/make_hf_heads_golden.py

It writes tests/data/hf_heads/
  sequence/   a random `BertForSequenceClassification` (3 labels "neg", "neutral", "pos",
              problem_type single_label_classification)
  token/      a random `BertForTokenClassification` (5 labels O, B-PER, I-PER, B-LOC, I-LOC)
  qa/         a random `BertForQuestionAnswering`
              each saved by transformers' save_pretrained (config.json with architectures and
              id2label, model.safetensors) plus tests/data/tiny_pretraining's vocab.txt and
              tokenizer_config.json; tiny config: hidden 32, 2 layers, 4 heads, vocab 120
  golden.npz  a fixed batch (input_ids, input_mask, segment_ids) and each model's logits in
              eval mode: sequence_logits [B, 3], token_logits [B, T, 5], start_logits /
              end_logits [B, T]

Every weight is random (seed 0; biases and LayerNorm weights moved off their initial values).
Rerun only when the inputs change; golden.npz records the versions that made it.
"""

from __future__ import annotations

import os
import shutil

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
OUT = os.path.join(DATA, "hf_heads")
TINY = os.path.join(DATA, "tiny_pretraining")
LABELS = {"sequence": ["neg", "neutral", "pos"],
          "token": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]}


def _batch() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    lengths = np.array([12, 9, 5])
    mask = (np.arange(12)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, 120, (3, 12)).astype(np.int32)
    ids[:, 0] = 2  # [CLS]
    ids *= mask
    segments = ((np.arange(12)[None] >= lengths[:, None] // 2) * mask).astype(np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def main() -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    batch = _batch()
    out: dict[str, np.ndarray] = dict(batch)
    classes = {"sequence": transformers.BertForSequenceClassification,
               "token": transformers.BertForTokenClassification,
               "qa": transformers.BertForQuestionAnswering}
    for kind, cls in classes.items():
        labels = LABELS.get(kind)
        extra = ({"id2label": dict(enumerate(labels)),
                  "label2id": {name: i for i, name in enumerate(labels)}} if labels else {})
        if kind == "sequence":
            extra["problem_type"] = "single_label_classification"
        config = transformers.BertConfig(
            vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
            hidden_act="gelu", layer_norm_eps=1e-12, **extra)
        model = cls(config).eval()
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(("bias", "LayerNorm.weight")):
                    param.add_(0.1 * torch.randn_like(param))
        target = os.path.join(OUT, kind)
        model.save_pretrained(target, safe_serialization=True)
        os.chmod(os.path.join(target, "model.safetensors"), 0o644)
        for name in ("vocab.txt", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(TINY, name), os.path.join(target, name))
        with torch.no_grad():
            result = model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                           attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                           token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long))
        if kind == "qa":
            out["start_logits"] = result.start_logits.numpy()
            out["end_logits"] = result.end_logits.numpy()
        else:
            out[f"{kind}_logits"] = result.logits.numpy()
    out["versions"] = np.array(f"transformers {transformers.__version__}, "
                               f"torch {torch.__version__}")
    np.savez_compressed(os.path.join(OUT, "golden.npz"), **out)
    for root, _, files in sorted(os.walk(OUT)):
        for name in sorted(files):
            path = os.path.join(root, name)
            print(os.path.relpath(path, DATA), os.path.getsize(path))


if __name__ == "__main__":
    main()
