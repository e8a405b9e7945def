"""Pretraining dynamics against the reference: tfbert's BertPretrainer and transformers'
BertForPreTraining (PyTorch) on the same synthetic masked-LM task, same batches, same optimizer
(AdamW 1e-3, decay 0.01 off LayerNorm/bias, epsilon 1e-6, global-norm clip 1.0).

The task can only be solved through positional attention (token t = token t-1 + 1, masked
tokens predicted from their neighbours), so it checks the part of pretraining the built-in
default run is slowest at: both models sit on the plateau first and leave it within the same
step budget. The initial weights differ (each library's own initializer) and when a model leaves
the plateau depends strongly on them and on the dropout draws, so the curves are compared by
when they leave it, with a wide tolerance, not step by step (`pytest -s` prints the figures).
"""

from __future__ import annotations

import numpy as np
import pytest

V, T, B, P = 200, 32, 32, 4
STEPS = 1000


def batches(seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(STEPS):
        start = rng.integers(5, V, (B, 1))
        ids = (5 + (start - 5 + np.arange(T)[None]) % (V - 5)).astype("int32")
        pos = np.sort(np.stack([rng.choice(np.arange(1, T - 1), P, replace=False)
                                for _ in range(B)]), 1).astype("int32")
        labels = np.take_along_axis(ids, pos, 1)
        masked = ids.copy()
        np.put_along_axis(masked, pos, 4, 1)  # 4 = [MASK]
        yield masked, pos, labels


def tfbert_mlm_losses() -> list[float]:
    import keras

    from tfbert import BertConfig, BertEncoder, BertPretrainer

    keras.utils.set_random_seed(1)
    config = BertConfig(vocab_size=V, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128, max_position_embeddings=64)
    model = BertPretrainer(BertEncoder(config))
    model.compile(optimizer=keras.optimizers.AdamW(1e-3, weight_decay=0.01, epsilon=1e-6,
                                                   global_clipnorm=1.0))
    losses = []
    for ids, pos, labels in batches():
        result = model.train_on_batch({
            "input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids),
            "masked_lm_positions": pos, "masked_lm_ids": labels,
            "masked_lm_weights": np.ones((B, P), "float32"),
            "next_sentence_labels": np.zeros((B, 1), "int32")}, return_dict=True)
        losses.append(float(result["mlm_loss"]))
    return losses


def torch_mlm_losses() -> list[float]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(1)
    config = transformers.BertConfig(vocab_size=V, hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=128,
                                     max_position_embeddings=64)
    model = transformers.BertForPreTraining(config).train()
    plain = [p for n, p in model.named_parameters() if "LayerNorm" in n or "bias" in n]
    decayed = [p for n, p in model.named_parameters() if not ("LayerNorm" in n or "bias" in n)]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.01},
                                   {"params": plain, "weight_decay": 0.0}], lr=1e-3, eps=1e-6)
    losses = []
    for ids, pos, labels in batches():
        target = np.full(ids.shape, -100, "int64")
        np.put_along_axis(target, pos, labels, 1)
        out = model(input_ids=torch.tensor(ids, dtype=torch.long),
                    labels=torch.tensor(target),
                    next_sentence_label=torch.zeros(B, dtype=torch.long))
        optimizer.zero_grad()
        out.loss.backward()  # MLM + NSP, the objective tfbert's pretrainer minimises
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        with torch.no_grad():  # the MLM part, as tfbert reports mlm_loss
            mlm = torch.nn.functional.cross_entropy(
                out.prediction_logits.reshape(-1, V), torch.tensor(target).reshape(-1),
                ignore_index=-100)
        losses.append(float(mlm))
    return losses


@pytest.mark.slow
def test_positional_mlm_learned_like_transformers():
    reference = torch_mlm_losses()  # first: skips at once without torch
    ours = tfbert_mlm_losses()
    window = lambda xs, step: float(np.mean(xs[step - 50:step]))  # noqa: E731

    def leaves(losses):  # first step whose 50-step mean is clearly below the plateau
        return next(s for s in range(50, STEPS + 1) if window(losses, s) < 4.8)

    for losses in (ours, reference):
        assert window(losses, 200) > 4.8  # the unigram plateau: ln(195) = 5.27
        assert window(losses, STEPS) < 3.8  # left it: neighbours are used
    print(f"left the plateau at step {leaves(ours)} (tfbert) / {leaves(reference)} "
          f"(transformers); step {STEPS}: {window(ours, STEPS):.2f} / "
          f"{window(reference, STEPS):.2f}")
    assert abs(leaves(ours) - leaves(reference)) < 300, (leaves(ours), leaves(reference))
