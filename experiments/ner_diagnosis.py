"""Why does a small tfbert tagger score below a BiLSTM on People's Daily NER? Measured.

The setting of the comparison: the built-in People's Daily NER, the first 3,000 training sentences,
max_seq_length 128, batch 32, dev and test held out. The BERT model is a random-init tiny model of
the default pretraining shape (2 layers, hidden 128, 2 heads, intermediate 512, no dropout in the
encoder; the built-in 8,000-piece vocab, `tfbert.pretraining_data.builtin.write_vocab`), or the
model of --init_checkpoint (then every run starts from it). Each run fine-tunes it with run_ner's
own pieces (`tfbert.tasks.ner.training_loss`, `tfbert.data.ner.encode_examples` / `make_dataset`,
`tfbert.training.finetune.finetune`: AdamW, warmup then linear decay to 0, the best dev epoch kept)
and scores, after every epoch, dev and the first --fit_examples training sentences (does it fit the
training set?). One option differs per run (RUNS). The BiLSTM baseline
(`tfbert.evaluation.baselines`) runs on the same sentences.

Before training, the mechanics that could silently hurt are measured on the real features:

    alignment   labelled weight on [CLS]/[SEP]/padding (must be 0), and every token's label on
                the piece its prediction reads (the first character on position 1)
    loss        run_ner's loss on one batch against the mean over the real tokens and the mean
                over all positions (padding included): which one it is
    init        the initial per-token loss against ln(C) and the logits' spread
    schedule    the learning rate over the run (warmup, linear decay to 0)

After each run: the dev errors of its final model, per gold entity (exact, wrong type, wrong
boundary, missed) and per predicted entity (spurious), and the token confusion gold x predicted.

    nice -n 15 python -m experiments.ner_diagnosis --output_dir=output/ner_diagnosis
    nice -n 15 python -m experiments.ner_diagnosis --output_dir=output/ner_diagnosis \\
        --runs=lr1e-3,bilstm --init_checkpoint=output/pretrain_default/model

Writes OUTPUT_DIR/ner_diagnosis.json and ner_diagnosis.md (tables); a run already in the
JSON (same settings) is kept, so a second command adds runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

logger = logging.getLogger("ner_diagnosis")

MODEL = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 512, "max_position_embeddings": 512, "hidden_dropout_prob": 0.0,
         "attention_probs_dropout_prob": 0.0}
# run name: NerConfig overrides (learning_rate, num_train_epochs, dropout, warmup_proportion,
# weight_decay) and BertConfig overrides under "model".
BASE = {"learning_rate": 5e-5, "num_train_epochs": 3.0, "dropout": 0.1,
        "warmup_proportion": 0.1}
RUNS: dict[str, dict[str, Any]] = {
    "lr5e-5": {},  # BERT's fine-tuning rate (run_ner.py's default for a pretrained model)
    "lr5e-4": {"learning_rate": 5e-4},
    "lr1e-3": {"learning_rate": 1e-3},
    "lr2e-3": {"learning_rate": 2e-3},
    "lr5e-3": {"learning_rate": 5e-3},
    "lr1e-3_dropout0": {"learning_rate": 1e-3, "dropout": 0.0},
    "lr1e-3_warmup0": {"learning_rate": 1e-3, "warmup_proportion": 0.0},
    "lr1e-3_encoder_dropout": {"learning_rate": 1e-3,
                               "model": {"hidden_dropout_prob": 0.1,
                                         "attention_probs_dropout_prob": 0.1}},
    "lr1e-3_init0.05": {"learning_rate": 1e-3, "model": {"initializer_range": 0.05}},
    "lr1e-3_10ep": {"learning_rate": 1e-3, "num_train_epochs": 10.0},
    "lr2e-3_10ep": {"learning_rate": 2e-3, "num_train_epochs": 10.0},
    "bilstm": {"baseline": True},
    "bilstm_10ep": {"baseline": True, "num_train_epochs": 10.0},
}
DEFAULT_RUNS = ("lr5e-5", "lr5e-4", "lr1e-3", "lr2e-3", "lr1e-3_dropout0", "lr1e-3_warmup0",
                "lr1e-3_10ep", "bilstm", "bilstm_10ep")


# --- setup ----------------------------------------------------------------------------------


def model_source(output_dir: str, init_checkpoint: str | None,
                 model_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """NerConfig fields naming the model: --init_checkpoint, or a random-init tiny model (its
    bert_config.json and the built-in vocab written into output_dir)."""
    if init_checkpoint:
        out: dict[str, Any] = {"init_checkpoint": init_checkpoint}
        if model_overrides:  # the checkpoint's config with the run's changes
            import tfbert

            config = tfbert.BertConfig.from_json_file(os.path.join(init_checkpoint,
                                                                   "config.json"))
            path = os.path.join(output_dir, f"bert_config_{_key(model_overrides)}.json")
            tfbert.BertConfig(**{**config.to_dict(), **model_overrides}).to_json_file(path)
            out["bert_config_file"] = path
        return out
    import tfbert
    from experiments.classifier_kit import builtin_vocab

    vocab_file = builtin_vocab(output_dir)
    with open(vocab_file, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    path = os.path.join(output_dir, f"bert_config_{_key(model_overrides or {})}.json")
    tfbert.BertConfig(vocab_size=vocab_size, lower_case=True,
                      **{**MODEL, **(model_overrides or {})}).to_json_file(path)
    return {"bert_config_file": path, "vocab_file": vocab_file}


def _key(overrides: dict[str, Any]) -> str:
    return "_".join(f"{k}{v:g}" for k, v in sorted(overrides.items())) or "base"


# --- mechanics ------------------------------------------------------------------------------


def mechanics(features: Any, train: Sequence[Any], labels: Sequence[str], model: Any,
              batch_size: int, num_train_steps: int, num_warmup_steps: int,
              peak_learning_rate: float) -> dict[str, Any]:
    """The checks of the module docstring on the run's training features and initial model."""
    import keras

    from tfbert.data import ner as data
    from tfbert.tasks.ner import training_loss
    from tfbert.training.optimization import WarmupLinearDecay

    # Alignment: where the loss weight lies, and whether each token's label is on its piece.
    ds = data.make_dataset(features, batch_size)
    weights = np.concatenate([w.numpy() for _, _, w in ds])  # [W, T]
    labels_of = np.concatenate([y.numpy() for _, y, _ in ds])
    lengths = features.input_mask.sum(1)
    positions = np.arange(weights.shape[1])[None, :]
    special = (positions == 0) | (positions == lengths[:, None] - 1)
    padding = positions >= lengths[:, None]
    index = {name: i for i, name in enumerate(labels)}
    misplaced = first_char_wrong = 0
    first_rows = {}
    for w, e in enumerate(features.window_example):
        first_rows.setdefault(int(e), w)
    for i, (example, rows) in enumerate(zip(train, features.piece_rows, strict=True)):
        for token, piece in enumerate(features.read_pieces[i]):
            if piece < 0:
                continue
            row, position = rows[piece]
            misplaced += (features.label_ids[row, position] != index[example.tags[token]]
                          or weights[row, position] != 1.0)
        first_char_wrong += features.label_ids[first_rows[i], 1] != index[example.tags[0]]
    alignment = {"windows": int(len(weights)), "weighted_positions": int(weights.sum()),
                 "tokens": int(sum(len(e.tokens) for e in train)),
                 "weight_on_cls_sep": float(weights[special].sum()),
                 "weight_on_padding": float(weights[padding].sum()),
                 "tokens_whose_label_is_not_on_their_read_piece": int(misplaced),
                 "sentences_whose_first_char_label_is_not_at_position_1": int(first_char_wrong),
                 "real_position_share": round(float((~padding).mean()), 4)}

    # Loss: run_ner's value on the first batch against the two candidate averages.
    x, y, w = next(iter(ds))
    logits = model(x, training=False)
    per_position = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    per_position, w = np.asarray(per_position), np.asarray(w)
    loss = {"run_ner_loss": float(training_loss(model)(y, logits, sample_weight=w)),
            "mean_over_labelled_tokens": float((per_position * w).sum() / w.sum()),
            "mean_over_all_positions": float((per_position * w).mean()),
            "ln_num_classes": math.log(len(labels))}

    # Initialisation: logits' spread and where the initial loss sits against ln(C).
    sample = {k: v[:256] for k, v in features.inputs().items()}
    all_logits = np.asarray(model.predict(sample, batch_size=64, verbose=0))  # [<=256, T, C]
    mask = weights[:len(all_logits)] > 0
    init = {"logits_std": float(all_logits[mask].std()),
            "initial_loss": loss["run_ner_loss"], "ln_num_classes": math.log(len(labels)),
            "o_share_of_labelled_tokens": float((labels_of[weights > 0] == 0).mean())}

    schedule = WarmupLinearDecay(peak_learning_rate, num_train_steps, num_warmup_steps)
    steps = sorted({0, num_warmup_steps, num_train_steps // 2, num_train_steps - 1})
    lr = {"num_train_steps": num_train_steps, "num_warmup_steps": num_warmup_steps,
          "at_step": {int(s): float(schedule(s)) for s in steps},
          "mean_over_run": float(np.mean([float(schedule(s))
                                          for s in range(num_train_steps)]))}
    return {"alignment": alignment, "loss": loss, "init": init, "schedule": lr}


# --- errors ---------------------------------------------------------------------------------


def error_breakdown(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
                    labels: Sequence[str]) -> dict[str, Any]:
    """Where the entity errors lie, and the token confusion.

    Each gold entity is "exact" (type and span), "wrong_type" (same span), "boundary" (the same
    type overlaps it with another span), "overlap_other_type" or "missed" (no predicted entity
    overlaps it); a predicted entity overlapping no gold entity is "spurious".

    Returns:
        {"gold": {category: count}, "spurious": int, "confusion": {gold tag: {predicted tag:
        count}}, "o_recall": share of gold O tokens predicted O, "entity_token_recall": share
        of gold entity tokens predicted as some entity}.
    """
    from tfbert.evaluation import get_entities

    counts: collections.Counter[str] = collections.Counter()
    spurious = 0
    confusion = {g: dict.fromkeys(labels, 0) for g in labels}
    for g_tags, p_tags in zip(gold, predicted, strict=True):
        for g, p in zip(g_tags, p_tags, strict=True):
            confusion[g][p] += 1
        g_ents, p_ents = get_entities(g_tags), get_entities(p_tags)
        overlaps = lambda a, b: a.start <= b.end and b.start <= a.end
        for e in g_ents:
            over = [p for p in p_ents if overlaps(e, p)]
            if e in over:
                counts["exact"] += 1
            elif any(p.start == e.start and p.end == e.end for p in over):
                counts["wrong_type"] += 1
            elif any(p.type == e.type for p in over):
                counts["boundary"] += 1
            elif over:
                counts["overlap_other_type"] += 1
            else:
                counts["missed"] += 1
        spurious += sum(1 for p in p_ents if not any(overlaps(p, e) for e in g_ents))
    o_total = sum(confusion["O"].values())
    entity_tokens = sum(sum(confusion[g].values()) for g in labels if g != "O")
    entity_as_entity = sum(n for g in labels if g != "O" for p, n in confusion[g].items()
                           if p != "O")
    return {"gold": {k: counts[k] for k in ("exact", "wrong_type", "boundary",
                                            "overlap_other_type", "missed")},
            "spurious": spurious, "confusion": confusion,
            "o_recall": confusion["O"]["O"] / max(o_total, 1),
            "entity_token_recall": entity_as_entity / max(entity_tokens, 1)}


# --- runs -----------------------------------------------------------------------------------


def bert_run(name: str, options: dict[str, Any], splits: dict[str, list[Any]],
             args: argparse.Namespace, want_mechanics: bool) -> dict[str, Any]:
    """One fine-tuning run with run_ner's pieces; dev and training-set F1 after every epoch."""
    import keras

    import tfbert
    from tfbert.data import ner as data
    from tfbert.evaluation import entity_metrics
    from tfbert.tasks.ner import NerConfig, predict_tags, training_loss
    from tfbert.training import finetune as ft

    settings = {**BASE, **{k: v for k, v in options.items() if k != "model"}}
    source = model_source(args.output_dir, args.init_checkpoint, options.get("model"))
    config = NerConfig(output_dir=os.path.join(args.output_dir, name),
                       task_name="people_daily", max_seq_length=args.max_seq_length,
                       train_batch_size=args.batch_size, seed=args.seed, verbose=0,
                       distribution_strategy="one_device", **source, **settings)
    keras.utils.set_random_seed(config.seed)
    labels = list(data.PEOPLE_DAILY_LABELS)
    model, vocab_file, lower_case = ft.build_model(
        tfbert.BertTokenClassifier, config, num_classes=len(labels), dropout=config.dropout)
    tokenizer = tfbert.BertTokenizer(vocab_file, lower_case=lower_case)
    fit_split = splits["train"][:args.fit_examples]
    features = {split: data.encode_examples(examples, tokenizer, config.max_seq_length, labels,
                                            long_input="windows")
                for split, examples in (("train", splits["train"]), ("fit", fit_split),
                                        ("dev", splits["dev"]), ("test", splits["test"]))}
    steps_per_epoch = math.ceil(len(features["train"].input_ids) / config.train_batch_size)
    num_train_steps = max(1, round(config.num_train_epochs * steps_per_epoch))
    out: dict[str, Any] = {"options": options, "settings": settings,
                           "num_windows": len(features["train"].input_ids),
                           "num_train_steps": num_train_steps}
    if want_mechanics:
        out["mechanics"] = mechanics(features["train"], splits["train"], labels, model,
                                     config.train_batch_size, num_train_steps,
                                     int(config.warmup_proportion * num_train_steps),
                                     config.learning_rate)

    def tags(split: str) -> list[list[str]]:
        return predict_tags(model, features[split], labels, config.eval_batch_size)

    def evaluate(m: Any) -> dict[str, Any]:
        dev = entity_metrics([e.tags for e in splits["dev"]], tags("dev"))
        fit = entity_metrics([e.tags for e in fit_split], tags("fit"))
        logger.info("%s: train F1 %.4f, dev F1 %.4f", name, fit["f1"], dev["f1"])
        return {**dev, "train_f1": fit["f1"]}

    start = time.perf_counter()
    outcome = ft.finetune(
        model, data.make_dataset(features["train"], config.train_batch_size, shuffle=True,
                                 seed=config.seed),
        loss=training_loss(model), config=config.finetune_config("f1", log_dir=None),
        evaluate_fn=evaluate, steps_per_epoch=steps_per_epoch)
    out["seconds"] = round(time.perf_counter() - start)
    out["history"] = [{k: round(v, 4) if isinstance(v, float) else v for k, v in h.items()
                       if k in ("epoch", "train_loss", "train_f1", "f1")}
                      for h in outcome.history]
    out["best_epoch"] = outcome.best_epoch
    out["dev"] = {k: outcome.best_metrics[k] for k in ("precision", "recall", "f1")}
    test_tags = tags("test")
    out["test"] = {k: v for k, v in entity_metrics([e.tags for e in splits["test"]],
                                                   test_tags).items() if k != "per_type"}
    out["dev_errors"] = error_breakdown([e.tags for e in splits["dev"]], tags("dev"), labels)
    return out


def bilstm_run(options: dict[str, Any], splits: dict[str, list[Any]],
               args: argparse.Namespace) -> dict[str, Any]:
    from tfbert.data import ner as data
    from tfbert.evaluation import baselines

    labels = list(data.PEOPLE_DAILY_LABELS)
    epochs = int(options.get("num_train_epochs", BASE["num_train_epochs"]))
    start = time.perf_counter()
    result = baselines.train_bilstm(splits["train"], splits["dev"], splits["test"], labels,
                                    epochs=epochs, batch_size=args.batch_size,
                                    max_seq_length=args.max_seq_length, seed=args.seed,
                                    train_eval_examples=args.fit_examples)
    return {"options": options, "settings": {"learning_rate": 2e-3, "num_train_epochs": epochs},
            "seconds": round(time.perf_counter() - start),
            "num_train_steps": result["num_train_steps"],
            "history": [{"epoch": h["epoch"], "train_loss": round(h["train_loss"], 4),
                         "train_f1": round(h["train_f1"], 4), "f1": round(h["dev_f1"], 4)}
                        for h in result["history"]],
            "best_epoch": result["best_epoch"],
            "dev": {k: result["dev"][k] for k in ("precision", "recall", "f1")},
            "test": {k: v for k, v in result["test"].items() if k != "per_type"}}


# --- report ---------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    rows = ["| run | lr | epochs (steps) | head dropout | warmup | train F1 by epoch | "
            "best dev F1 | test F1 | s |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.get("runs", {}).items():
        s = r["settings"]
        fit = " ".join(f"{h['train_f1']:.2f}" for h in r["history"])
        rows.append(f"| {name} | {s['learning_rate']:g} | {s['num_train_epochs']:g} "
                    f"({r['num_train_steps']}) | {s.get('dropout', '-')} | "
                    f"{s.get('warmup_proportion', '-')} | {fit} | {r['dev']['f1']:.4f} "
                    f"(epoch {r['best_epoch']}) | {r['test']['f1']:.4f} | {r['seconds']} |")
    errors = {n: r["dev_errors"] for n, r in results.get("runs", {}).items()
              if "dev_errors" in r}
    if errors:
        rows += ["", "Dev errors of each run's final model (gold entities by outcome; "
                 "predicted entities overlapping no gold one):", "",
                 "| run | exact | wrong type | boundary | other type | missed | spurious | "
                 "O recall | entity-token recall |", "|---|---|---|---|---|---|---|---|---|"]
        for name, e in errors.items():
            g = e["gold"]
            rows.append(f"| {name} | {g['exact']} | {g['wrong_type']} | {g['boundary']} | "
                        f"{g['overlap_other_type']} | {g['missed']} | {e['spurious']} | "
                        f"{e['o_recall']:.4f} | {e['entity_token_recall']:.4f} |")
    if "mechanics" in results:
        rows += ["", "Mechanics:", "", "```", json.dumps(results["mechanics"], indent=1), "```"]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="output/ner_diagnosis")
    parser.add_argument("--runs", default=",".join(DEFAULT_RUNS),
                        help=f"comma-separated runs, of: {', '.join(RUNS)}")
    parser.add_argument("--init_checkpoint", default=None,
                        help="start every BERT run from this model (a pretrained model dir)")
    parser.add_argument("--max_train_examples", type=int, default=3000)
    parser.add_argument("--max_eval_examples", type=int, default=None)
    parser.add_argument("--fit_examples", type=int, default=500,
                        help="training sentences scored after every epoch")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        parser.error(f"--runs: unknown {unknown}; known: {sorted(RUNS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from tfbert.data import ner as data
    from tfbert.fileio import write_json, write_text

    os.makedirs(args.output_dir, exist_ok=True)
    path = os.path.join(args.output_dir, "ner_diagnosis.json")
    settings = {k: v for k, v in vars(args).items() if k not in ("runs", "output_dir")}
    results: dict[str, Any] = {"settings": settings, "runs": {}}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            previous = json.load(f)
        if previous.get("settings") == settings:
            results = previous
    splits = {"train": data.people_daily_ner("train")[:args.max_train_examples],
              **{s: data.people_daily_ner(s)[:args.max_eval_examples] for s in ("dev", "test")}}
    results["data"] = {s: len(v) for s, v in splits.items()}
    for name in runs:
        options = RUNS[name]
        if options.get("baseline"):
            result = bilstm_run(options, splits, args)
        else:
            result = bert_run(name, options, splits, args, "mechanics" not in results)
            if "mechanics" in result:
                results["mechanics"] = result.pop("mechanics")
        results["runs"][name] = result
        logger.info("%s: dev F1 %.4f, test F1 %.4f (%d s)", name, result["dev"]["f1"],
                    result["test"]["f1"], result["seconds"])
        write_json(path, results)  # after every run: an interrupted study keeps its runs
        write_text(os.path.join(args.output_dir, "ner_diagnosis.md"), markdown(results))
    print(markdown(results))
    return results


if __name__ == "__main__":
    main()
