"""The classification kit measured: multi-label tfbert vs TF-IDF, and long documents read as
windows vs truncated.

    nice -n 10 python -m experiments.classifier_kit --output_dir=output/classifier_kit

Both studies fine-tune a tiny random-init BERT (2 layers, hidden 128, 2 heads, intermediate
512) with the built-in vocab (a WordPiece vocab of 8,000 learned from the built-in Chinese
corpus, as the default pretraining data builds it; cached in output_dir), so a run takes
minutes on a CPU; the figures compare settings, they are not what a pretrained model reaches.

multi_label   `--task_name=people_daily_types`: the entity types (LOC, ORG, PER) each People's
              Daily sentence mentions (about 4 in 10 none). tfbert (thresholds tuned on dev)
              against one-vs-rest logistic regression on character 1-3-gram TF-IDF, trained on
              the same training sentences, C picked on dev micro-F1, at probability 0.5 and with
              thresholds tuned on dev by the same `tune_thresholds`. Test micro/macro F1 and
              the exact-match ratio.
long          Long documents made from the built-in sentiment reviews (`long_documents`):
              several reviews of one label concatenated, 300-1,500 characters, drawn per split
              (train documents from train reviews, ...), deterministic for --seed. The same
              model trained and scored with --long_input=truncate and --long_input=windows
              (max_seq_length 128, doc_stride 64); held-out accuracy. With the windows model
              the test windows' logits are also pooled by max and by the mean of the windows'
              probabilities, against the mean of logits the model was trained with.

Writes output_dir/classifier_kit.json and classifier_kit.md (the tables).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfbert.data import classification as cls_data
from tfbert.evaluation.classification import multi_label_metrics, tune_thresholds

logger = logging.getLogger("classifier_kit")

MODEL = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 512, "max_position_embeddings": 128}


def builtin_vocab(output_dir: str, vocab_size: int = 8000) -> str:
    """vocab.txt learned from the training documents of the built-in Chinese corpus, as
    `tfbert.pretraining_data.builtin.default_data` learns it (built once into output_dir)."""
    from tfbert.pretraining_data import builtin

    path = os.path.join(output_dir, "vocab.txt")
    if not os.path.exists(path):
        os.makedirs(output_dir, exist_ok=True)
        builtin.write_vocab(path, builtin.split_documents()[0], vocab_size)
    return path


def model_config(output_dir: str, vocab_file: str) -> str:
    from tfbert import BertConfig

    path = os.path.join(output_dir, "bert_config.json")
    with open(vocab_file, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    BertConfig(vocab_size=vocab_size, **MODEL).to_json_file(path)
    return path


# --- multi-label ---------------------------------------------------------------------------------


def tfidf_multi_label(splits: dict[str, list[Any]], labels: Sequence[str],
                      grid: Sequence[float] = (1.0, 3.0, 10.0, 30.0)) -> dict[str, Any]:
    """One-vs-rest logistic regression on character 1-3-gram TF-IDF; C picked on dev micro-F1
    at probability 0.5. Test metrics at 0.5 and at thresholds tuned on dev."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    y = {s: cls_data.label_matrix(e, labels) for s, e in splits.items()}
    vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True,
                                 min_df=2)
    x = {"train": vectorizer.fit_transform([e.text for e in splits["train"]])}
    x.update({s: vectorizer.transform([e.text for e in splits[s]]) for s in ("dev", "test")})
    best: dict[str, Any] | None = None
    for c in grid:
        model = OneVsRestClassifier(LogisticRegression(C=c, max_iter=2000)).fit(x["train"],
                                                                               y["train"])
        p = {s: model.predict_proba(x[s]) for s in ("dev", "test")}
        dev = multi_label_metrics(y["dev"], p["dev"] >= 0.5, labels)
        logger.info("TF-IDF OvR C=%g: dev micro-F1 %.4f", c, dev["micro_f1"])
        if best is None or dev["micro_f1"] > best["dev"]["micro_f1"]:
            thresholds = tune_thresholds(y["dev"], p["dev"].astype(np.float32))
            best = {"C": c, "dev": dev,
                    "test": multi_label_metrics(y["test"], p["test"] >= 0.5, labels),
                    "thresholds": dict(zip(labels, thresholds.tolist(), strict=True)),
                    "test_tuned": multi_label_metrics(y["test"], p["test"] >= thresholds,
                                                      labels)}
    assert best is not None
    return best


def multi_label_study(args: argparse.Namespace, config_file: str, vocab_file: str
                      ) -> dict[str, Any]:
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    task = "people_daily_types"
    labels = cls_data.builtin_labels(task)
    splits = {s: cls_data.builtin_examples(task, s) for s in ("train", "dev", "test")}
    splits["train"] = splits["train"][:args.max_train_examples]
    for s in ("dev", "test"):
        splits[s] = splits[s][:args.max_eval_examples]
    out: dict[str, Any] = {"num_examples": {s: len(e) for s, e in splits.items()},
                           "label_share": {s: dict(zip(labels, cls_data.label_matrix(
                               e, labels).mean(0).round(4).tolist(), strict=True))
                               for s, e in splits.items()}}
    t0 = time.time()
    out["tfidf"] = tfidf_multi_label(splits, labels)
    out["tfidf"]["seconds"] = round(time.time() - t0)
    t0 = time.time()
    result = run_classification(ClassificationConfig(
        output_dir=os.path.join(args.output_dir, task), task_name=task,
        bert_config_file=config_file, vocab_file=vocab_file,
        max_seq_length=args.multi_label_seq_length, train_batch_size=args.batch_size,
        num_train_epochs=args.epochs, learning_rate=args.learning_rate,
        max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples,
        seed=args.seed, distribution_strategy="one_device", verbose=2))
    out["tfbert"] = {k: result[k] for k in ("dev", "test", "thresholds", "train")}
    out["tfbert"]["seconds"] = round(time.time() - t0)
    return out


# --- long documents ------------------------------------------------------------------------------


def long_documents(examples: Sequence[cls_data.ClassificationExample], num_documents: int,
                   seed: int, min_chars: int = 300, max_chars: int = 1500
                   ) -> list[cls_data.ClassificationExample]:
    """Documents of several reviews of one label, `min_chars`..`max_chars` characters.

    Each document: a label drawn with the reviews' own label shares, a target length drawn
    uniformly from [min_chars, max_chars], then reviews of that label drawn without repeats
    (within the document) and joined with a space while the document stays within max_chars,
    until it reaches the target. A document under min_chars when the reviews run out is drawn
    again. Deterministic for `seed` (numpy's default_rng).

    Args:
        examples: sequence of ClassificationExample. Labelled reviews (one split's).
        num_documents: int. Documents to make.
        seed: int. The random seed.
        min_chars, max_chars: int. Document length bounds, in characters.
    """
    rng = np.random.default_rng(seed)
    by_label: dict[str, list[str]] = {}
    for e in examples:
        if len(e.text) <= max_chars:
            by_label.setdefault(e.label, []).append(e.text)
    names = sorted(by_label)
    shares = np.array([len(by_label[n]) for n in names], np.float64)
    documents: list[cls_data.ClassificationExample] = []
    while len(documents) < num_documents:
        label = names[rng.choice(len(names), p=shares / shares.sum())]
        target = int(rng.integers(min_chars, max_chars + 1))
        parts: list[str] = []
        length = -1
        for i in rng.permutation(len(by_label[label])):
            text = by_label[label][i]
            if length + 1 + len(text) > max_chars:
                continue
            parts.append(text)
            length += 1 + len(text)
            if length >= target:
                break
        if length >= min_chars:
            documents.append(cls_data.ClassificationExample(
                " ".join(parts), label, source=f"long_documents:{len(documents)}"))
    return documents


def write_tsv(path: str, examples: Sequence[cls_data.ClassificationExample]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write("text\tlabel\n")
        f.writelines(f"{e.text}\t{e.label}\n" for e in examples)
    return path


def pooling_comparison(model_dir: str, examples: Sequence[cls_data.ClassificationExample],
                       max_seq_length: int, doc_stride: int) -> dict[str, float]:
    """Test accuracy of one windows-trained model with its windows' logits pooled three ways."""
    import tensorflow as tf

    import tfbert

    model = tfbert.checkpoints.load_model(model_dir)
    metadata = tfbert.checkpoints.read_metadata(model_dir)
    tokenizer = tfbert.BertTokenizer(os.path.join(model_dir, "vocab.txt"),
                                     lower_case=metadata["lower_case"])
    windows = cls_data.encode_windows(examples, tokenizer, max_seq_length, doc_stride)
    logits = model.predict(windows.inputs(), batch_size=256, verbose=0)  # [W, C]
    labels = metadata["labels"]
    gold = cls_data.label_ids(examples, labels)
    doc = windows.document
    probabilities = np.asarray(tf.nn.softmax(logits))
    pooled = {"mean_logits": np.stack([logits[doc == i].mean(0) for i in range(len(gold))]),
              "max_logits": np.stack([logits[doc == i].max(0) for i in range(len(gold))]),
              "mean_probabilities": np.stack([probabilities[doc == i].mean(0)
                                              for i in range(len(gold))])}
    return {name: float((p.argmax(-1) == gold).mean()) for name, p in pooled.items()}


def long_study(args: argparse.Namespace, config_file: str, vocab_file: str) -> dict[str, Any]:
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    folder = os.path.join(args.output_dir, "long_documents")
    os.makedirs(folder, exist_ok=True)
    counts = {"train": args.long_train_documents, "dev": args.long_eval_documents,
              "test": args.long_eval_documents}
    docs = {s: long_documents(cls_data.builtin_examples("sentiment", s), n, args.seed + i)
            for i, (s, n) in enumerate(counts.items())}
    files = {f"{s}_file": write_tsv(os.path.join(folder, f"{s}.tsv"), d)
             for s, d in docs.items()}
    lengths = np.array([len(e.text) for d in docs.values() for e in d])
    out: dict[str, Any] = {"documents": {s: len(d) for s, d in docs.items()},
                           "characters": {"min": int(lengths.min()), "median": int(
                               np.median(lengths)), "max": int(lengths.max())}}
    t = args.long_seq_length
    for mode in ("truncate", "windows"):
        t0 = time.time()
        result = run_classification(ClassificationConfig(
            output_dir=os.path.join(folder, mode), **files, long_input=mode,
            doc_stride=t // 2 if mode == "windows" else None, bert_config_file=config_file,
            vocab_file=vocab_file, max_seq_length=t, train_batch_size=args.batch_size,
            num_train_epochs=args.epochs, learning_rate=args.learning_rate, seed=args.seed,
            distribution_strategy="one_device", verbose=2))
        out[mode] = {k: result[k] for k in ("dev", "test", "train") if k in result}
        out[mode]["data"] = result.get("data")
        out[mode]["seconds"] = round(time.time() - t0)
    out["pooling"] = pooling_comparison(os.path.join(folder, "windows", "model"), docs["test"],
                                        t, t // 2)
    return out


# --- report --------------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    rows = []
    if "multi_label" in results:
        r = results["multi_label"]
        n = r["num_examples"]
        rows += [f"people_daily_types, {n['train']} train / {n['dev']} dev / {n['test']} test "
                 "sentences (test)", "",
                 "| model | micro-F1 | macro-F1 | exact match |", "|---|---|---|---|"]
        for name, m in (("TF-IDF char 1-3 + OvR logistic regression (C "
                         f"{r['tfidf']['C']:g}), threshold 0.5", r["tfidf"]["test"]),
                        ("TF-IDF, thresholds tuned on dev", r["tfidf"]["test_tuned"]),
                        ("tfbert tiny random-init, thresholds tuned on dev",
                         r["tfbert"]["test"])):
            rows.append(f"| {name} | {m['micro_f1']:.4f} | {m['macro_f1']:.4f} | "
                        f"{m['exact_match']:.4f} |")
        rows.append("")
    if "long" in results:
        r = results["long"]
        c = r["characters"]
        rows += [f"long sentiment documents, {r['documents']['train']} train / "
                 f"{r['documents']['test']} test, {c['min']}-{c['max']} characters (median "
                 f"{c['median']})", "",
                 "| long_input | dev accuracy | test accuracy | run seconds |",
                 "|---|---|---|---|"]
        for mode in ("truncate", "windows"):
            m = r[mode]
            rows.append(f"| {mode} | {m['dev']['accuracy']:.4f} | {m['test']['accuracy']:.4f} | "
                        f"{m['seconds']} |")
        rows += ["", "| pooling of the windows model's test windows | accuracy |", "|---|---|"]
        rows += [f"| {k} | {v:.4f} |" for k, v in r["pooling"].items()]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="output/classifier_kit")
    parser.add_argument("--only", default="multi_label,long",
                        help="comma-separated subset of multi_label, long")
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max_train_examples", type=int, default=8000,
                        help="multi_label: training sentences (TF-IDF and tfbert alike)")
    parser.add_argument("--max_eval_examples", type=int, default=2000,
                        help="multi_label: dev and test sentences")
    parser.add_argument("--multi_label_seq_length", type=int, default=64)
    parser.add_argument("--long_train_documents", type=int, default=1200)
    parser.add_argument("--long_eval_documents", type=int, default=400)
    parser.add_argument("--long_seq_length", type=int, default=128)
    args = parser.parse_args(argv)
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    if only - {"multi_label", "long"}:
        parser.error(f"--only: unknown {sorted(only - {'multi_label', 'long'})}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.makedirs(args.output_dir, exist_ok=True)
    vocab_file = builtin_vocab(args.output_dir)
    config_file = model_config(args.output_dir, vocab_file)
    results: dict[str, Any] = {"settings": vars(args), "model": MODEL}
    if "multi_label" in only:
        results["multi_label"] = multi_label_study(args, config_file, vocab_file)
    if "long" in only:
        results["long"] = long_study(args, config_file, vocab_file)
    with open(os.path.join(args.output_dir, "classifier_kit.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, sort_keys=True, ensure_ascii=False)
    table = markdown(results)
    with open(os.path.join(args.output_dir, "classifier_kit.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)
    return results


if __name__ == "__main__":
    main()
