"""The transformers systems of `bench.bench_finetune`, run in a child process of the
interpreter that has torch, transformers and accelerate (`--torch_python`): imports neither
TensorFlow nor tfbert.

`BertForSequenceClassification` under `Trainer` with dynamic padding (`DataCollatorWithPadding`,
`BertTokenizerFast` over the benchmark's vocab file), PyTorch on CPU with 2 threads: torch's
AdamW with Trainer's linear schedule and warmup, epsilon 1e-6, clip 1.0, weight decay 0.01 off
for biases and LayerNorm (Trainer's rule); "transformers (by length)" samples with Trainer's
`train_sampling_strategy="group_by_length"`.

    python -m bench.finetune_torch --serve SPEC          # timed repetitions, stdin -> stdout
    python -m bench.finetune_torch --curve NAME --spec SPEC --out FILE
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.bench_finetune import (
    BATCH,
    CLIP_NORM,
    EPSILON,
    HEAD_DROPOUT,
    SEED,
    SEQ,
    TORCH,
    WARMUP_PROPORTION,
    WEIGHT_DECAY,
    Clock,
    score_every,
    span,
    subset,
    timed,
)


def bert_tokenizer(transformers: Any, vocab_file: str, lower_case: bool) -> Any:
    """BertTokenizerFast over a vocab.txt. transformers 5 takes the vocab as `vocab` (a
    {token: id} dict) and drops an unknown `vocab_file` keyword without a word, leaving a
    5-token vocab that reads every character as [UNK]: the size is checked here (checked on
    transformers 5.24)."""
    with open(vocab_file, encoding="utf-8") as f:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
    tokenizer = transformers.BertTokenizerFast(vocab=vocab, do_lower_case=lower_case)
    if len(tokenizer) != len(vocab) or tokenizer.cls_token_id != vocab["[CLS]"]:
        raise RuntimeError(f"BertTokenizerFast over {vocab_file} has {len(tokenizer)} tokens "
                           f"(the file {len(vocab)}), [CLS] = {tokenizer.cls_token_id}")
    return tokenizer


def trainers(spec: dict, names: Sequence[str], max_steps: int = -1,
             evaluate_every: int | None = None, clock: Clock | None = None,
             dev: int | None = None) -> dict:
    """A Trainer of BertForSequenceClassification per name in TORCH, on the spec's examples
    (dev: the first `dev`) tokenized by BertTokenizerFast; each with a `step_times` list (the
    time at the end of every step of its last train())."""
    import numpy as np
    import torch
    import transformers

    torch.set_num_threads(2)
    s = spec["shapes"][spec.get("shape", "builtin")]
    config = transformers.BertConfig(
        vocab_size=s["vocab_size"], hidden_size=s["hidden_size"],
        num_hidden_layers=s["num_hidden_layers"], num_attention_heads=s["num_attention_heads"],
        intermediate_size=s["intermediate_size"],
        hidden_act={"gelu": "gelu", "gelu_tanh": "gelu_new"}[s["hidden_act"]],
        hidden_dropout_prob=s["hidden_dropout_prob"],
        attention_probs_dropout_prob=s["attention_probs_dropout_prob"],
        max_position_embeddings=s["max_position_embeddings"],
        type_vocab_size=s["type_vocab_size"], classifier_dropout=HEAD_DROPOUT, num_labels=2)
    models = {}
    for name in names:
        transformers.set_seed(SEED)
        models[name] = transformers.BertForSequenceClassification(config)
    if clock:  # as the other systems' clocks: from the raw texts and the untrained model
        clock.restart()
    tokenizer = bert_tokenizer(transformers, spec["vocab_file"], spec["lower_case"])

    def encode(part: dict) -> list[dict]:
        enc = tokenizer(part["texts"], truncation=True, max_length=SEQ)
        return [{"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
                 "label": label} for ids, types, mask, label in
                zip(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"],
                    part["labels"], strict=True)]

    dev_part = subset(spec["dev"], dev)
    train, dev_set, labels = encode(spec["train"]), encode(dev_part), np.asarray(
        dev_part["labels"])

    class Steps(transformers.TrainerCallback):
        """Step end times; with a clock, every dev score on it (Trainer times its own
        evaluation: eval_runtime), and a score after the last step too."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.times: list[float] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self.times.append(time.perf_counter())
            if clock and state.global_step >= state.max_steps:
                control.should_evaluate = True
            return control

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None,
                        **kwargs: Any) -> None:
            if clock:
                clock.discount(metrics["eval_runtime"])
                clock.point(state.global_step, metrics["eval_accuracy"])

    made = {}
    for name in names:
        args = transformers.TrainingArguments(
            output_dir=os.path.join(spec["workdir"], "transformers"), use_cpu=True,
            per_device_train_batch_size=BATCH, per_device_eval_batch_size=BATCH,
            learning_rate=spec["learning_rate"], weight_decay=WEIGHT_DECAY,
            adam_epsilon=EPSILON, max_grad_norm=CLIP_NORM, lr_scheduler_type="linear",
            warmup_steps=WARMUP_PROPORTION, num_train_epochs=spec["epochs"],
            max_steps=max_steps, train_sampling_strategy=TORCH[name],
            eval_strategy="steps" if evaluate_every else "no", eval_steps=evaluate_every,
            save_strategy="no", logging_strategy="no", report_to=[], seed=SEED,
            disable_tqdm=True, dataloader_num_workers=0)
        steps = Steps()
        made[name] = transformers.Trainer(
            model=models[name], args=args,
            train_dataset=train, eval_dataset=dev_set,
            data_collator=transformers.DataCollatorWithPadding(tokenizer),
            compute_metrics=lambda p, y=labels: {
                "accuracy": float((p.predictions.argmax(-1) == y).mean())},
            callbacks=[steps])
        made[name].step_times = steps
    return made


def serve(spec_file: str) -> None:
    """The PyTorch side of the interleaved rounds: answers each "train NAME" / "eval NAME" line
    on stdin with one JSON line {"s": seconds} on stdout."""
    answers, sys.stdout = sys.stdout, sys.stderr  # what the libraries print goes to stderr
    with open(spec_file, encoding="utf-8") as f:
        spec = json.load(f)
    made = trainers(spec, spec["names"], max_steps=spec["warm"] + spec["steps"],
                    dev=spec["dev_limit"])
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in sys.stdin:
        command, _, name = line.strip().partition(" ")
        if command == "quit":
            break
        trainer = made[name]
        if command == "train":
            trainer.train()
            seconds = span(trainer.step_times.times, spec["warm"])
        else:
            seconds = timed(lambda t=trainer: t.predict(t.eval_dataset))
        print(json.dumps({"s": seconds}), file=answers, flush=True)


def curve(spec: dict, name: str) -> list[dict]:
    clock = Clock()
    per_epoch = math.ceil(len(spec["train"]["texts"]) / BATCH)
    trainers(spec, [name], evaluate_every=score_every(per_epoch), clock=clock)[name].train()
    return clock.points


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", metavar="SPEC", help="answer timed repetitions")
    parser.add_argument("--curve", help="train one system (a name in TORCH), write its curve")
    parser.add_argument("--spec", help="the run's spec.json (with --curve)")
    parser.add_argument("--out", help="where --curve writes")
    args = parser.parse_args()
    try:
        import accelerate  # noqa: F401  (Trainer needs it)
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        sys.exit(f"{sys.executable} cannot run the transformers systems ({e}): pass "
                 "--torch_python, an interpreter with torch, transformers and accelerate")
    if args.serve:
        serve(args.serve)
    else:
        with open(args.spec, encoding="utf-8") as f:
            points = curve(json.load(f), args.curve)
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"points": points}, f)
