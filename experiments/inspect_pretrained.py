"""What a pretrained checkpoint has learned, in the numbers the README's quality section quotes:

- per layer, the mean attention a token pays to its previous and next token (1 / length when
  attention ignores position) on held-out pretraining batches;
- how far the position embeddings moved: their std over the trained positions and over the
  positions no sequence reached (still at their init, less weight decay), and the cosine of
  neighbouring rows (smooth, high, once positions are learned);
- masked-LM accuracy on those batches and the share of the single most predicted token;
- the pipeline's masking, as a check: shares of masked positions holding [MASK] and keeping
  their token;
- the unigram baseline: the entropy of the token frequencies of the first training records, and
  the masked-LM loss on the held-out masked positions of a model that predicts those
  frequencies everywhere (the plateau a model that ignores context sits on).

    python -m experiments.inspect_pretrained [--model output/pretrain_default/model] [--batches 4]
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="output/pretrain_default/model")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--cache_dir", default="cache")
    parser.add_argument("--unigram_records", type=int, default=20000,
                        help="training records counted for the unigram baseline")
    args = parser.parse_args()
    import numpy as np

    import tfbert
    from tfbert import checkpoints
    from tfbert.pretraining_data import records
    from tfbert.pretraining_data.pipeline import pretraining_dataset
    from tfbert.training.pretrain import default_data

    pretrainer = checkpoints.load_model(args.model)
    config = pretrainer.encoder.config
    probing = tfbert.BertEncoder(config, output_attention_probs=True)
    probing.set_weights(pretrainer.encoder.get_weights())
    seq = 128
    data = default_data(args.cache_dir, max_seq_length=seq, lower_case=config.lower_case)
    vocab = open(os.path.join(args.model, "vocab.txt"), encoding="utf-8").read().split("\n")
    ds = pretraining_dataset(data.eval_files, os.path.join(args.model, "vocab.txt"), seq, 20, 32,
                             seed=1, lower_case=config.lower_case, repeat=False, shuffle=False)
    tokenizer = tfbert.BertTokenizer(os.path.join(args.model, "vocab.txt"),
                                     lower_case=config.lower_case)
    counts = np.zeros(len(tokenizer.vocab))
    texts = records.read_records(records.expand_file_pattern(data.train_files)).take(
        args.unigram_records).batch(1024).map(records.parse_examples)
    for batch in texts:
        for key in ("text_a", "text_b"):
            counts += np.bincount(tokenizer.tokenize(batch[key]).flat_values.numpy(),
                                  minlength=len(counts))
    frequency = (counts + 1) / (counts + 1).sum()  # add-one: no label gets probability 0
    unigram_loss = 0.0
    correct = total = keep = masked = 0.0
    predicted: dict[int, int] = {}
    per_layer: list[list[float]] = []
    for features in ds.take(args.batches):
        x = {k: v.numpy() for k, v in features.items()}
        valid = x["masked_lm_weights"] > 0
        at = np.take_along_axis(x["input_ids"], x["masked_lm_positions"], 1)
        keep += float((at == x["masked_lm_ids"])[valid].sum())
        masked += float((at == vocab.index("[MASK]"))[valid].sum())
        out = pretrainer(x, training=False)
        guess = np.asarray(out["mlm_logits"]).argmax(-1)
        correct += float((guess == x["masked_lm_ids"])[valid].sum())
        unigram_loss -= float(np.log(frequency[x["masked_lm_ids"][valid]]).sum())
        total += float(valid.sum())
        for g in guess[valid]:
            predicted[int(g)] = predicted.get(int(g), 0) + 1
        mask = x["input_mask"].astype(bool)
        probs = probing({k: x[k] for k in ("input_ids", "input_mask", "segment_ids")},
                        training=False)["attention_probs"]
        t = np.arange(seq)
        for i, p in enumerate(probs):  # [B, N, T, T]
            p = np.asarray(p).mean(1)  # over heads: [B, T, T]
            to_prev = p[:, t[1:], t[:-1]][mask[:, 1:]].mean()
            to_next = p[:, t[:-1], t[1:]][mask[:, :-1]].mean()
            if len(per_layer) <= i:
                per_layer.append([0.0, 0.0])
            per_layer[i][0] += to_prev / args.batches
            per_layer[i][1] += to_next / args.batches
    table = np.asarray(pretrainer.encoder.get_layer("embeddings").position_embeddings.embeddings)
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    top_id, top_count = max(predicted.items(), key=lambda kv: kv[1])
    report = {
        "attention_to_previous_and_next_token_per_layer": [
            [round(float(a), 3), round(float(b), 3)] for a, b in per_layer],
        "position_embedding_std_trained_positions": float(table[:seq].std()),
        "position_embedding_std_untrained_positions": float(table[seq:].std()),
        "position_embedding_neighbour_cosine_trained": float(
            (unit[:seq - 1] * unit[1:seq]).sum(1).mean()),
        "masked_lm_accuracy": correct / total,
        "most_predicted_token": vocab[top_id],
        "most_predicted_token_share": top_count / total,
        "masked_positions_holding_mask": masked / total,
        "masked_positions_keeping_their_token": keep / total,
        "unigram_entropy_of_training_tokens": float(
            -(counts[counts > 0] / counts.sum() * np.log(counts[counts > 0] / counts.sum())).sum()),
        "unigram_masked_lm_loss": unigram_loss / total,
    }
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
