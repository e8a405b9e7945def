"""Masked-LM learning curves of tfbert and transformers on the built-in pretraining data.

Not a speed benchmark: it asks whether tfbert's pretraining learns like the reference
implementation on real text. Both models get the same config (no dropout), the same batches
(drawn once from `pretraining_dataset` over the built-in records, dynamic masking), and the same
optimizer (AdamW, weight decay 0.01 off LayerNorm and biases, epsilon 1e-6, global-norm clip
1.0, linear warmup then linear decay). Prints the mean masked-LM loss and accuracy of every
100-step window for each system, and writes them as JSON (docs/performance.md, "The built-in
default pretraining").

    python -m experiments.mlm_dynamics [--steps 2000] [--seq 64] [--hidden 128] [--layers 2]
        [--learning_rate 1e-3] [--systems tfbert,transformers] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

WINDOW = 100


def batches(args) -> tuple[list[dict], int]:
    """`args.steps` training batches of the built-in data (numpy), and the vocab size."""
    import tensorflow as tf

    from tfbert.pretraining_data.pipeline import pretraining_dataset
    from tfbert.text.vocab import load_vocab
    from tfbert.training.pretrain import default_data

    data = default_data(args.cache_dir, args.seq)
    tf.random.set_seed(args.seed)
    ds = pretraining_dataset(data.train_files, batch_size=args.batch_size, seed=args.seed,
                             vocab_file=data.vocab_file, max_seq_length=args.seq,
                             max_predictions_per_seq=args.predictions, masked_lm_prob=0.15,
                             whole_word_mask=False, lower_case=True)
    out = list(ds.repeat().take(args.steps).as_numpy_iterator())
    return out, len(load_vocab(data.vocab_file))


def schedule(args):
    """tfbert's WarmupLinearDecay as a LambdaLR factor (update s = 0, 1, ...)."""
    warmup, total = max(1, args.steps // 10), args.steps
    return lambda s: s / warmup if s < warmup else max(0.0, total - s) / max(total - warmup, 1)


def windows(losses: list[float], hits: list[float], counts: list[float]) -> list[list[float]]:
    rows = []
    for end in range(WINDOW, len(losses) + 1, WINDOW):
        part = slice(end - WINDOW, end)
        rows.append([end, round(sum(losses[part]) / WINDOW, 4),
                     round(sum(hits[part]) / max(sum(counts[part]), 1.0), 4)])
    return rows


def run_tfbert(args, data: list[dict], vocab_size: int) -> list[list[float]]:
    import keras
    import numpy as np

    from tfbert import BertConfig, BertEncoder, BertPretrainer
    from tfbert.training.optimization import create_optimizer

    keras.utils.set_random_seed(args.seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=args.hidden,
                        num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                        intermediate_size=4 * args.hidden, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    model = BertPretrainer(BertEncoder(config))
    model.compile(optimizer=create_optimizer(args.learning_rate, args.steps,
                                             max(1, args.steps // 10), weight_decay=0.01,
                                             variables=model.trainable_variables))
    losses, hits, counts = [], [], []
    for batch in data:
        out = model.train_on_batch(batch, return_dict=True)  # running means since reset
        model.reset_metrics()
        weights = batch["masked_lm_weights"]
        losses.append(out["mlm_loss"])
        hits.append(out["masked_lm_accuracy"] * float(np.sum(weights)))
        counts.append(float(np.sum(weights)))
    return windows(losses, hits, counts)


def run_transformers(args, data: list[dict], vocab_size: int) -> list[list[float]]:
    import torch
    import transformers

    torch.manual_seed(args.seed)
    config = transformers.BertConfig(vocab_size=vocab_size, hidden_size=args.hidden,
                                     num_hidden_layers=args.layers,
                                     num_attention_heads=args.hidden // 64,
                                     intermediate_size=4 * args.hidden, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    model = transformers.BertForPreTraining(config).train()
    plain = [p for n, p in model.named_parameters() if "LayerNorm" in n or "bias" in n]
    decayed = [p for n, p in model.named_parameters() if not ("LayerNorm" in n or "bias" in n)]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.01},
                                   {"params": plain, "weight_decay": 0.0}],
                                  lr=args.learning_rate, eps=1e-6)
    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(args))
    losses, hits, counts = [], [], []
    for batch in data:
        t = {k: torch.tensor(v, dtype=torch.float32 if k == "masked_lm_weights" else torch.long)
             for k, v in batch.items()}
        out = model(input_ids=t["input_ids"], attention_mask=t["input_mask"],
                    token_type_ids=t["segment_ids"])
        positions = t["masked_lm_positions"][..., None].expand(-1, -1, vocab_size)
        logits = torch.gather(out.prediction_logits, 1, positions)  # [B, P, V]
        labels, weights = t["masked_lm_ids"], t["masked_lm_weights"]
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
        mlm = (ce * weights).sum() / (weights.sum() + 1e-5)  # tfbert's formula
        nsp = torch.nn.functional.cross_entropy(out.seq_relationship_logits,
                                                t["next_sentence_labels"].reshape(-1))
        optimizer.zero_grad()
        (mlm + nsp).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        lr_schedule.step()
        losses.append(float(mlm.detach()))
        hits.append(float(((logits.argmax(-1) == labels).float() * weights).sum()))
        counts.append(float(weights.sum()))
    return windows(losses, hits, counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--predictions", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128, help="a multiple of 64 (head size)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--systems", default="tfbert,transformers")
    parser.add_argument("--cache_dir", default="cache")
    parser.add_argument("--out", default=None, help="JSON file for the curves")
    args = parser.parse_args()
    if args.hidden % 64:
        parser.error(f"--hidden must be a multiple of 64, got {args.hidden}")
    runners = {"tfbert": run_tfbert, "transformers": run_transformers}
    systems = args.systems.split(",")
    unknown = [s for s in systems if s not in runners]
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {sorted(runners)}")
    data, vocab_size = batches(args)
    result = {"config": vars(args), "window": WINDOW, "curves": {}}
    for name in systems:
        start = time.perf_counter()
        curve = runners[name](args, data, vocab_size)
        result["curves"][name] = curve
        print(f"{name} ({time.perf_counter() - start:.0f} s): step, masked-LM loss, accuracy")
        for row in curve:
            print(f"  {row[0]:6d}  {row[1]:.3f}  {row[2]:.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
