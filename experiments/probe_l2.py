"""The probe's L2 strength against selectivity, on probe-train only (tfbert.probe's default).

A linear probe with little regularisation memorises characters: the control task (a fixed random
label per character type, Hewitt & Liang 2019) is then as easy as the real task, and selectivity
(task score - control score) says nothing. This study fits the character tasks' probes on the
features of People's Daily dev sentences 0-999 and scores them on dev sentences 1,000-1,499 (both
inside probe-train; probe-test, the test split, is not read), for each L2 strength of a grid, at
the embeddings, the middle layer and the last layer.

    python -m experiments.probe_l2 --model=tfbert-chinese --out=output/probe_l2.json

Writes {"model", "fit", "scored", "rows": [{task, l2, layer, task_score, control, selectivity,
sec}]}
(docs/probing.md, "The probe's L2").
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

GRID = (1e-3, 1e-2, 3e-2, 1e-1, 3e-1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tfbert-chinese")
    parser.add_argument("--out", default="output/probe_l2.json")
    parser.add_argument("--seq_length", type=int, default=128)
    args = parser.parse_args(argv)

    from tfbert.fileio import write_json
    from tfbert.probe import features, probes
    from tfbert.probe import tasks as task_data
    from tfbert.probe.pipeline import _labels
    from tfbert.text.tokenizer import BertTokenizer

    path = features.resolve_model(args.model)
    encoder = features.load_encoder(path)
    tokenizer = BertTokenizer(features.vocab_path(path), lower_case=encoder.config.lower_case)
    sentences, _ = task_data.char_sentences("dev", 1500)
    sets = {"chars_train": (sentences[:1000], [s.text for s in sentences[:1000]]),
            "chars_test": (sentences[1000:], [s.text for s in sentences[1000:]])}
    encoded = {k: features.encode(tokenizer, texts, args.seq_length)
               for k, (_, texts) in sets.items()}
    net = features.hidden_state_function(encoder)
    special = {"cls_id": tokenizer.cls_id, "sep_id": tokenizer.sep_id}
    x = {k: features.layer_features(net, e, special, args.seq_length, "chars")
         for k, e in encoded.items()}
    last = encoder.config.num_hidden_layers
    rows = []
    for task in task_data.CHAR_TASKS:
        fit, held = _labels(task, sets, encoded)
        control = task_data.control_labels(fit, held, 0)
        metric, classes = task_data.metric_of(task, fit.names)
        for l2 in GRID:
            for layer in (0, last // 2, last):
                began = time.perf_counter()
                guess = probes.train_probe(x["chars_train"][layer], fit.labels,
                                           x["chars_test"][layer], l2)
                task_score = probes.score(metric, held.labels, guess, classes)
                guess = probes.train_probe(x["chars_train"][layer], control[0],
                                           x["chars_test"][layer], l2)
                control_score = probes.score(metric, control[1], guess, classes)
                row = {"task": task, "l2": l2, "layer": layer, "task_score": round(task_score, 4),
                       "control": round(control_score, 4),
                       "selectivity": round(task_score - control_score, 4),
                       "sec": round(time.perf_counter() - began, 1)}
                rows.append(row)
                print(row, flush=True)
    result = {"model": args.model, "fit": "People's Daily dev sentences 0-999",
              "scored": "dev sentences 1,000-1,499", "rows": rows}
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
