"""Peak memory of one serving_default request by text length: is a long text's cost linear?

    python -m experiments.request_memory [--chars 10,10000,30000,60000] [--export_dir DIR]

Without --export_dir it exports two tiny models with random weights (2 layers, hidden 32,
max_seq_length 32, a Chinese character vocab of the built-in corpus): NER reading long texts
in windows (doc_stride 16) and QA (doc_stride 8), into a temp folder. Each request runs in
its own child process (load the SavedModel, one call with one text of N characters of People's
Daily; QA: one question and a context of N characters), which prints its peak resident set
size (getrusage ru_maxrss, what `/usr/bin/time -v` reports) and the call's time. The 10-char
row is the process's own cost (TensorFlow, the SavedModel, the corpus). (docs/serving.md,
"Request size"; docs/performance.md, "Long texts in windows".)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def child(export_dir: str, chars: int, qa: bool) -> None:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's op)

    from tfbert.data import corpora

    text = ""
    for line in corpora.people_daily_lines():
        text += line
        if len(text) >= chars:
            break
    text = text[:chars]
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    begin = time.perf_counter()
    if qa:
        serve(text=tf.constant(["首都是哪里？"]), text_b=tf.constant([text]))
    else:
        serve(text=tf.constant([text]))
    print(json.dumps({"seconds": time.perf_counter() - begin,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def tiny_exports(root: str) -> dict[str, str]:
    """{"ner": export dir, "qa": export dir} of the tiny models."""
    import keras

    import tfbert
    from tfbert.data import corpora
    from tfbert.data import ner as ner_data
    from tfbert.export import export_model

    counts = collections.Counter()
    for i, text in enumerate(corpora.iter_chinese_text()):
        counts.update(ch for ch in text if not ch.isspace())
        if i > 20000:
            break
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [c for c, _ in
                                                             counts.most_common(3000)]
    vocab = os.path.join(root, "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    config = tfbert.BertConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=64, initializer_range=0.2)
    keras.utils.set_random_seed(0)
    labels = list(ner_data.PEOPLE_DAILY_LABELS)
    models = {
        "ner": (tfbert.BertTokenClassifier(tfbert.BertEncoder(config), len(labels)),
                {"task": "ner", "labels": labels, "max_seq_length": 32, "token_separator": "",
                 "long_input": "windows", "doc_stride": 16}),
        "qa": (tfbert.BertSpanLabeler(tfbert.BertEncoder(config)),
               {"task": "qa", "max_seq_length": 32, "max_query_length": 8, "doc_stride": 8,
                "max_answer_length": 6})}
    out = {}
    for kind, (model, metadata) in models.items():
        model_dir = os.path.join(root, kind)
        tfbert.save_pretrained(model, model_dir, vocab_file=vocab, metadata=metadata)
        out[kind] = export_model(model_dir, os.path.join(root, "saved_models", kind),
                                 check=False)["export_dir"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", default="10,10000,30000,60000")
    parser.add_argument("--export_dir", default=None,
                        help="measure this export (NER or QA) instead of the tiny ones")
    parser.add_argument("--child", nargs=3, metavar=("EXPORT", "CHARS", "QA"), default=None)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2] == "1")
        return
    with tempfile.TemporaryDirectory() as root:
        if args.export_dir:
            with open(os.path.join(args.export_dir, "assets.extra", "tfbert_export.json"),
                      encoding="utf-8") as f:
                exports = {json.load(f)["task"]: args.export_dir}
        else:
            exports = tiny_exports(root)
        for kind, export_dir in exports.items():
            for chars in (int(c) for c in args.chars.split(",")):
                run = subprocess.run(
                    [sys.executable, "-m", "experiments.request_memory", "--child", export_dir,
                     str(chars), "1" if kind == "qa" else "0"], capture_output=True, text=True)
                if run.returncode:
                    print(f"{kind} {chars:>9,} chars: failed: {run.stderr.strip()[-300:]}")
                    continue
                result = json.loads(run.stdout.strip().splitlines()[-1])
                print(f"{kind} {chars:>9,} chars: peak RSS {result['peak_mb']:,.0f} MB, "
                      f"{result['seconds']:.1f} s")


if __name__ == "__main__":
    main()
