"""Trains one of the simplest baselines (`tfbert.evaluation.baselines`) alone and writes its JSON.

--task=ner is the character BiLSTM tagger on People's Daily (--crf: with tfbert's linear-chain
CRF), --task=sentiment the character n-gram TF-IDF + logistic regression on the built-in reviews;
`tfbert.evaluation.baselines` describes both.

    nice -n 10 python -m experiments.baselines --task=ner --max_train_examples=3000 \\
        --epochs=3 --output_dir=output/baselines
    nice -n 10 python -m experiments.baselines --task=ner --crf --output_dir=output/baselines
    python -m experiments.baselines --task=sentiment --output_dir=output/baselines

Writes OUTPUT_DIR/<name>.json (ner_bilstm, ner_bilstm_crf or sentiment_tfidf): the settings,
the dev and test metrics, and (NER) the per-epoch history with the training loss and the
entity F1 on the training sentences and on dev. Deterministic for a --seed on one machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any

import tensorflow as tf

from tfbert.evaluation.baselines import ner_baseline, tfidf_baseline
from tfbert.fileio import write_json

logger = logging.getLogger("baselines")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=("ner", "sentiment"), required=True)
    parser.add_argument("--output_dir", default="output/baselines")
    parser.add_argument("--max_train_examples", type=int, default=None)
    parser.add_argument("--max_eval_examples", type=int, default=None)
    parser.add_argument("--crf", action="store_true", help="ner: a CRF instead of the softmax")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    parser.add_argument("--max_seq_length", type=int, default=128,
                        help="ner: characters of a training sentence read")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    for name in ("max_train_examples", "max_eval_examples", "epochs", "batch_size",
                 "max_seq_length"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be positive, got {value}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    start = time.time()
    if args.task == "sentiment":
        name = "sentiment_tfidf"
        result = tfidf_baseline(max_train_examples=args.max_train_examples)
    else:
        tf.config.experimental.enable_op_determinism()
        name = "ner_bilstm_crf" if args.crf else "ner_bilstm"
        result = ner_baseline(args.max_train_examples, args.max_eval_examples,
                              epochs=args.epochs, batch_size=args.batch_size,
                              learning_rate=args.learning_rate,
                              max_seq_length=args.max_seq_length, crf=args.crf, seed=args.seed)
        result["per_type_test_f1"] = {t: round(m["f1"], 4)
                                      for t, m in result["test"]["per_type"].items()}
    result = {"name": name, "settings": vars(args), "seconds": round(time.time() - start),
              **result}
    os.makedirs(args.output_dir, exist_ok=True)
    path = os.path.join(args.output_dir, f"{name}.json")
    write_json(path, result)
    metric = "accuracy" if args.task == "sentiment" else "f1"
    logger.info("%s: dev %s %.4f, test %.4f (%s)", name, metric, result["dev"][metric],
                result["test"][metric], path)
    return result


if __name__ == "__main__":
    main()
