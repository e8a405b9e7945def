"""Fine-tune a sentence encoder on text pairs and score it as retrieval, beside BM25.

With only --output_dir and a model it runs the built-in retrieval task qa_paragraphs (the
built-in QA set's questions against its paragraphs); --task_name=headline_lead matches People's
Daily headlines to their articles' first paragraphs:

    python run_embedding.py --init_checkpoint=output/pretrain_default/model \\
        --output_dir=output/embedding
    python run_embedding.py --init_checkpoint=all-MiniLM-L6-v2 --train_file=pairs.tsv \\
        --dev_file=dev_pairs.tsv --output_dir=output/search --loss=mnrl

Files: TSV (header row) or JSONL of anchor, positive (and negative) pairs for the ranking losses
mnrl / mnrl_symmetric, or text, text_b, score for cosent / cosine. --init_checkpoint may be a
sentence-transformers directory (its pooling, projection and normalisation are kept) or any
checkpoint tfbert reads (--pooling, --normalize). Writes output_dir/results.json ({"dev": {"start",
"model", "bm25": recall@1/5/10, mrr@10, ndcg@10}, "test": {...}}) and the model in
output_dir/model; `python -m tfbert.export --model_dir=output_dir/model` serves it (text in,
`embeddings` out).
"""

from __future__ import annotations

from absl import app, flags

from tfbert.cli import common_flags
from tfbert.fileio import json_text
from tfbert.models.contrastive import LOSSES
from tfbert.models.sentence_encoder import POOLING_MODES
from tfbert.tasks.embedding import BEST_METRICS, BUILTIN_TASKS, TASK, EmbeddingConfig

_D = EmbeddingConfig(output_dir="unused", task_name=BUILTIN_TASKS[0])  # its own flags' defaults

common_flags.define_finetune_flags(
    EmbeddingConfig, train_help="Training pairs: TSV or JSONL (anchor, positive[, negative]; "
    "or text, text_b, score).", dev_help="Dev pairs, scored after every epoch (best kept).",
    test_help="Test pairs, scored at the end.")
common_flags.define_google_tpu_flags()
flags.DEFINE_enum("task_name", None, list(BUILTIN_TASKS), "Built-in retrieval task (the default "
                  "when no file is given: qa_paragraphs).")
flags.DEFINE_enum("loss", _D.loss, list(LOSSES), "mnrl: multiple-negatives ranking (in-batch "
                  "negatives, gathered across replicas); mnrl_symmetric: both directions; "
                  "cosent / cosine: scored pairs.")
common_flags.define_field_flag(EmbeddingConfig, "scale", "Cosine similarity scale of mnrl and "
                               "cosent (1 / temperature).")
flags.DEFINE_enum("pooling", None, list(POOLING_MODES), "Pooling for a checkpoint without "
                  "a sentence-transformers one (default: the checkpoint's, else mean).")
flags.DEFINE_bool("normalize", None, "L2-normalise the embeddings (default: the checkpoint's, "
                  "else true).")
flags.DEFINE_enum("best_metric", None, list(BEST_METRICS), "Dev metric that picks the epoch "
                  "kept (default ndcg@10; spearman for scored pairs).")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    files = FLAGS.train_file or FLAGS.dev_file or FLAGS.test_file
    task_name = FLAGS.task_name or (None if files else BUILTIN_TASKS[0])
    steps = {} if FLAGS.task_name or not files else common_flags.steps_for_files()
    config = common_flags.config_from_flags(TASK.config_class, task_name=task_name, **steps,
                                            **common_flags.google_tpu_overrides())
    results = common_flags.run_task(TASK.run, config, TASK.name, config.best_metric)
    print(json_text({split: {kind: {m: results[split][kind].get(m) for m in
                                    ("recall@1", "recall@10", "mrr@10", "ndcg@10", "spearman")
                                    if m in results[split][kind]}
                             for kind in ("start", "model", "bm25") if results[split].get(kind)}
                     for split in ("dev", "test") if split in results}, indent=2))


def entry() -> None:
    """The console command (pyproject.toml's [project.scripts])."""
    common_flags.run(main)


if __name__ == "__main__":
    entry()
