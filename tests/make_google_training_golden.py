"""Makes the training fixtures with google-research/bert's own training code (TF1 graph).

Run from the repo root; it needs TensorFlow and the path of the google-research/bert checkout, a
bare git directory fetched with the `fetch` tool (github:google-research/bert):

    .venv/bin/python tests/make_google_training_golden.py /work/.mirror/google-research+bert/repo

The code is read from commit eedf5716ce1268e56f0a50264a88cafad334ac61 of that directory (`git
show COMMIT:modeling.py`, ...) and executed at run time; none of it is copied here. It runs under
`tensorflow.compat.v1` in graph mode with the shims of tests/make_google_head_golden.py (that
script's `tf.layers.dense` and `tf.contrib.layers.layer_norm` written with compat.v1 variables
under the same names), which a module's own `import tensorflow as tf` also gets while it is
executed (optimization.py subclasses `tf.train.Optimizer` at import); nothing else of GR's code
is changed but the one line below.

What runs, in plain `tf.compat.v1.Session` loops (no Estimator), batch 16, 100 steps, 10 warmup:

- fine-tuning: run_classifier.py's `create_model` (num_labels 3) and optimization.py's
  `create_optimizer`, from tests/data/google_heads/classifier (its bert_config.json with both
  dropout probabilities set to 0; `create_model` gets is_training=False, which in GR's code only
  switches dropout off: BertModel's and create_model's own fixed keep_prob 0.9 on the pooled
  output), on 64 synthetic examples (sequence 16, sentence pairs, label = first token id mod 3)
  fed in a recorded order (a fresh permutation per pass), at lr 2e-5 and 1e-3;
- pretraining: BertModel (is_training=True, dropout 0 in the config), run_pretraining.py's
  `get_masked_lm_output` and `get_next_sentence_output`, loss = MLM + NSP as its model_fn adds
  them, and `create_optimizer`, from a tiny checkpoint written here with the same functions
  (tests/data/google_training/pretraining/), on GR's static-masked records
  tests/data/google_records/pretrain.tfrecord (64 records, sequence 32, 5 predictions) in a
  recorded order, at lr 5e-5 and 1e-3.

GR's race, pinned: `create_optimizer` computes the learning rate from `global_step` and groups
`global_step.assign(global_step + 1)` with the weight updates without ordering them, so a
step's updates may read the next step's rate. The script makes the increment wait for the
updates (one control dependency around that line), so every step runs at rate schedule(step)
for the step being taken, as GR's comments intend. The initial checkpoint is loaded as GR's
model_fn does (`get_assignment_map_from_checkpoint`, `init_from_checkpoint`).

It writes tests/data/google_training/
  pretraining/        bert_config.json (vocab 173, hidden 32, 2 layers, 2 heads, intermediate
                      64, positions 32, dropout 0), bert_model.ckpt.* (encoder + cls/predictions
                      + cls/seq_relationship, every value random, seed 0), vocab.txt (the
                      records' vocab)
  finetune_data.npz   the 64 examples (input_ids, input_mask, segment_ids, label_ids)
  golden.json         per kind, the order (example or record indices, [100][16]); per run, the
                      loss of every step (before its update), the global gradient norm GR clips
                      by (`clip_by_global_norm`'s, before clipping), the rate of each step
  final_weights.npz   the final values of a few named variables per run (the word table at
                      the small rates only), keys "<run>:<GR variable name>"

Rerun only when the inputs change (the files are committed, about 240 KB); reruns give the
same bytes. It takes about 30 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
OUT = os.path.join(DATA, "google_training")
FINETUNE_CHECKPOINT = os.path.join(DATA, "google_heads", "classifier")
RECORDS = os.path.join(DATA, "google_records", "pretrain.tfrecord")
RECORDS_VOCAB = os.path.join(DATA, "google_records", "vocab.txt")
BATCH, STEPS, WARMUP = 16, 100, 10
RATES = {"finetune": (2e-5, 1e-3), "pretrain": (5e-5, 1e-3)}
PRETRAIN_CONFIG = {"vocab_size": 173, "hidden_size": 32, "num_hidden_layers": 2,
                   "num_attention_heads": 2, "intermediate_size": 64, "hidden_act": "gelu",
                   "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                   "max_position_embeddings": 32, "type_vocab_size": 2,
                   "initializer_range": 0.02}
NUM_LABELS, EXAMPLES, SEQ = 3, 64, 16
PREDICTIONS = 5  # the records' max_predictions_per_seq
RACE_LINE = "  train_op = tf.group(train_op, [global_step.assign(new_global_step)])\n"
RACE_PIN = ("  with tf.control_dependencies([train_op]):  # pinned: the rate's reads come first\n"
            "    train_op = tf.group(train_op, [global_step.assign(new_global_step)])\n")
RACE_NOTE = ("GR's create_optimizer groups global_step's increment with the updates without "
             "ordering it against the learning rate's read of global_step; the fixture pins it "
             "with one control dependency (the increment waits for the updates), so each step "
             "runs at schedule(step) for the step being taken")
SCHEDULE_NOTE = ("rate(s) = lr * s / warmup for s < warmup, else lr * (1 - s / total) "
                 "(polynomial_decay power 1 over all steps, wrapped by warmup)")
NORM_NOTE = ("global_norm: the norm tf.clip_by_global_norm computes in create_optimizer (clip "
             "1.0), before clipping; a gather's gradient (IndexedSlices) counts its duplicate "
             "rows separately, as GR's own clip does")
LOSS_NOTE = "loss of each step, computed before that step's update"
KEPT = {  # a few named variables per run (GR names), kept at the end of each run
    "common": ["bert/embeddings/word_embeddings", "bert/embeddings/token_type_embeddings",
               "bert/encoder/layer_0/attention/self/query/kernel",
               "bert/encoder/layer_1/output/dense/kernel",
               "bert/encoder/layer_1/output/LayerNorm/gamma",
               "bert/encoder/layer_1/output/LayerNorm/beta", "bert/pooler/dense/bias"],
    "finetune": ["output_weights", "output_bias"],
    "pretrain": ["cls/predictions/transform/dense/kernel", "cls/predictions/output_bias",
                 "cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias"],
}

sys.path.insert(0, HERE)
import make_google_head_golden as heads  # noqa: E402  (its shims, its commit, its source reader)

COMMIT = heads.COMMIT


def _module(git_dir: str, name: str, shim, source: str | None = None):
    """GR's module `name` executed with `shim` as its `tf`."""
    module = types.ModuleType(name)
    text = source if source is not None else heads._blob(git_dir, f"{name}.py")
    real = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = shim  # its `import tensorflow as tf` (optimization.py's
    try:                              # AdamWeightDecayOptimizer subclasses tf.train.Optimizer)
        exec(compile(text, f"bert@{COMMIT[:7]}/{name}.py", "exec"), module.__dict__)
    finally:
        sys.modules["tensorflow"] = real
    module.tf = shim  # its functions look `tf` up at call time
    return module


def _optimization(git_dir: str, shim):
    source = heads._blob(git_dir, "optimization.py")
    if source.count(RACE_LINE) != 1:
        raise SystemExit("optimization.py: the global_step line to pin is not there once")
    return _module(git_dir, "optimization", shim, source.replace(RACE_LINE, RACE_PIN))


def finetune_data() -> dict[str, np.ndarray]:
    """64 sentence pairs of length 6..16 over ids 5..119 ([CLS] = 2, [SEP] = 3)."""
    rng = np.random.default_rng(7)
    ids = rng.integers(5, 120, (EXAMPLES, SEQ)).astype(np.int32)
    lengths = rng.integers(6, SEQ + 1, EXAMPLES)
    mask = (np.arange(SEQ)[None] < lengths[:, None]).astype(np.int32)
    first = lengths // 2
    ids[:, 0] = 2
    ids[np.arange(EXAMPLES), first - 1] = 3
    ids[np.arange(EXAMPLES), lengths - 1] = 3
    ids *= mask
    segments = ((np.arange(SEQ)[None] >= first[:, None]) * mask).astype(np.int32)
    labels = (ids[:, 1] % NUM_LABELS).astype(np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments, "label_ids": labels}


def read_records(path: str = RECORDS) -> dict[str, np.ndarray]:
    """GR's records as its input_fn decodes them (int64 -> int32), in file order."""
    import tensorflow as tf

    rows: dict[str, list] = {}
    for record in tf.compat.v1.io.tf_record_iterator(path):
        feature = tf.train.Example.FromString(record).features.feature
        for key, value in feature.items():
            data = (np.array(value.float_list.value, np.float32) if value.float_list.value
                    else np.array(value.int64_list.value, np.int64).astype(np.int32))
            rows.setdefault(key, []).append(data)
    return {k: np.stack(v) for k, v in rows.items()}


def order(count: int, seed: int) -> np.ndarray:
    """[STEPS, BATCH] indices: passes over `count` items, each a fresh permutation."""
    rng = np.random.default_rng(seed)
    flat = np.concatenate([rng.permutation(count) for _ in range(-(-STEPS * BATCH // count))])
    return flat[:STEPS * BATCH].reshape(STEPS, BATCH).astype(np.int32)


def schedule(peak: float, step: int) -> float:
    return peak * step / WARMUP if step < WARMUP else peak * (1.0 - step / STEPS)


def _graph(kind: str, git_dir: str, config: dict, seq: int):
    """GR's training graph for `kind` on placeholders: (placeholders, loss, modules)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    shim = heads._tf_shim(v1)
    modeling = _module(git_dir, "modeling", shim)
    bert_config = modeling.BertConfig.from_dict(config)
    if kind == "finetune":
        names = ("input_ids", "input_mask", "segment_ids")
        feeds = {k: v1.placeholder(tf.int32, [BATCH, seq], k) for k in names}
        feeds["label_ids"] = v1.placeholder(tf.int32, [BATCH], "label_ids")
        namespace = {"tf": shim, "modeling": modeling}
        exec(compile(heads._function(heads._blob(git_dir, "run_classifier.py"), "create_model"),
                     f"bert@{COMMIT[:7]}/run_classifier.py", "exec"), namespace)
        loss, _, _, _ = namespace["create_model"](
            bert_config=bert_config, is_training=False, input_ids=feeds["input_ids"],
            input_mask=feeds["input_mask"], segment_ids=feeds["segment_ids"],
            labels=feeds["label_ids"], num_labels=NUM_LABELS, use_one_hot_embeddings=False)
        return feeds, loss, modeling
    p = PREDICTIONS
    feeds = {k: v1.placeholder(tf.int32, [BATCH, seq], k)
             for k in ("input_ids", "input_mask", "segment_ids")}
    feeds["masked_lm_positions"] = v1.placeholder(tf.int32, [BATCH, p], "masked_lm_positions")
    feeds["masked_lm_ids"] = v1.placeholder(tf.int32, [BATCH, p], "masked_lm_ids")
    feeds["masked_lm_weights"] = v1.placeholder(tf.float32, [BATCH, p], "masked_lm_weights")
    feeds["next_sentence_labels"] = v1.placeholder(tf.int32, [BATCH, 1], "next_sentence_labels")
    source = heads._blob(git_dir, "run_pretraining.py")
    namespace = {"tf": shim, "modeling": modeling}
    for name in ("gather_indexes", "get_masked_lm_output", "get_next_sentence_output"):
        exec(compile(heads._function(source, name), f"bert@{COMMIT[:7]}/run_pretraining.py",
                     "exec"), namespace)
    model = modeling.BertModel(config=bert_config, is_training=True,
                               input_ids=feeds["input_ids"], input_mask=feeds["input_mask"],
                               token_type_ids=feeds["segment_ids"], use_one_hot_embeddings=False)
    masked_lm_loss, _, _ = namespace["get_masked_lm_output"](
        bert_config, model.get_sequence_output(), model.get_embedding_table(),
        feeds["masked_lm_positions"], feeds["masked_lm_ids"], feeds["masked_lm_weights"])
    next_sentence_loss, _, _ = namespace["get_next_sentence_output"](
        bert_config, model.get_pooled_output(), feeds["next_sentence_labels"])
    return feeds, masked_lm_loss + next_sentence_loss, modeling


def write_pretraining_checkpoint(git_dir: str) -> str:
    """GR's pretraining variables, every value random (seed 0, biases and LayerNorm too)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    target = os.path.join(OUT, "pretraining")
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        _graph("pretrain", git_dir, PRETRAIN_CONFIG, PRETRAIN_CONFIG["max_position_embeddings"])
        variables = v1.global_variables()
        rng = np.random.default_rng(0)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            for variable in variables:
                value = session.run(variable)
                if re.search(r"(bias|beta|gamma)$", variable.op.name):
                    value = value + 0.1 * rng.standard_normal(value.shape)
                variable.load(value.astype(np.float32), session)
            os.makedirs(target, exist_ok=True)
            v1.train.Saver(variables).save(session, os.path.join(target, "bert_model.ckpt"),
                                           write_meta_graph=False)
    os.remove(os.path.join(target, "checkpoint"))  # it holds absolute paths
    with open(os.path.join(target, "bert_config.json"), "w", encoding="utf-8") as f:
        json.dump(PRETRAIN_CONFIG, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copyfile(RECORDS_VOCAB, os.path.join(target, "vocab.txt"))
    return os.path.join(target, "bert_model.ckpt")


def train(kind: str, git_dir: str, init_checkpoint: str, config: dict, data: dict,
          steps: np.ndarray, peak: float) -> tuple[dict, dict]:
    """GR's run: per-step losses and clip norms, and the kept variables' final values."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        feeds, loss, modeling = _graph(kind, git_dir, config, data["input_ids"].shape[1])
        tvars = v1.trainable_variables()
        assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, init_checkpoint)
        v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
        optimization = _optimization(git_dir, heads._tf_shim(v1))
        train_op = optimization.create_optimizer(loss, peak, STEPS, WARMUP, False)
        norm = graph.get_tensor_by_name("global_norm/global_norm:0")  # clip_by_global_norm's
        global_step = v1.train.get_global_step()
        names = [n for n in KEPT["common"] + KEPT[kind]  # the word table at the small rates
                 if peak < 1e-4 or not n.endswith("word_embeddings")]
        kept = {v.op.name: v for v in tvars if v.op.name in names}
        assert len(kept) == len(names), sorted(kept)
        losses, norms = [], []
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            for step, rows in enumerate(steps):
                assert session.run(global_step) == step
                feed = {feeds[k]: data[k][rows] for k in feeds}
                value, clip_norm, _ = session.run([loss, norm, train_op], feed)
                losses.append(float(value))
                norms.append(float(clip_norm))
            assert session.run(global_step) == STEPS
            final = session.run(kept)
    return {"losses": _round(losses), "global_norms": _round(norms),
            "learning_rates": _round([schedule(peak, s) for s in range(STEPS)])}, final


def _round(values: list[float]) -> list[float]:
    return [float(f"{v:.9g}") for v in values]  # float32 round-trips in 9 digits


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} GOOGLE_RESEARCH_BERT_GIT_DIR")
    git_dir = sys.argv[1]
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(FINETUNE_CHECKPOINT, "bert_config.json"), encoding="utf-8") as f:
        finetune_config = dict(json.load(f), hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
    finetune = finetune_data()
    np.savez_compressed(os.path.join(OUT, "finetune_data.npz"), **finetune)
    pretrain_checkpoint = write_pretraining_checkpoint(git_dir)
    records = read_records()
    setups = {
        "finetune": (os.path.join(FINETUNE_CHECKPOINT, "bert_model.ckpt"), finetune_config,
                     finetune, order(EXAMPLES, 1)),
        "pretrain": (pretrain_checkpoint, PRETRAIN_CONFIG, records,
                     order(len(records["input_ids"]), 2)),
    }
    runs, weights = {}, {}
    orders = {kind: setup[3].tolist() for kind, setup in setups.items()}
    for kind, (checkpoint, config, data, steps) in setups.items():
        for peak in RATES[kind]:
            name = f"{kind}_lr{peak:g}"
            print(name, flush=True)
            run, final = train(kind, git_dir, checkpoint, config, data, steps, peak)
            runs[name] = {"kind": kind, "learning_rate": peak, **run}
            weights.update({f"{name}:{k}": v for k, v in final.items()})
            print(f"  loss {run['losses'][0]:.6f} -> {run['losses'][-1]:.6f}, "
                  f"norm[0] {run['global_norms'][0]:.6f}")
    golden = {
        "source": {"repository": "google-research/bert", "commit": COMMIT,
                   "files": ["modeling.py", "optimization.py", "run_classifier.py",
                             "run_pretraining.py"]},
        "made_by": "tests/make_google_training_golden.py",
        "versions": f"tensorflow {tf.__version__}",
        "race": RACE_NOTE, "schedule": SCHEDULE_NOTE, "global_norm": NORM_NOTE,
        "losses": LOSS_NOTE,
        "settings": {"batch_size": BATCH, "num_train_steps": STEPS, "num_warmup_steps": WARMUP,
                     "dropout": 0.0, "weight_decay_rate": 0.01, "epsilon": 1e-6,
                     "clip_norm": 1.0},
        "checkpoints": {"finetune": "tests/data/google_heads/classifier",
                        "pretrain": "tests/data/google_training/pretraining"},
        "data": {"finetune": "tests/data/google_training/finetune_data.npz (order: example "
                             "indices)",
                 "pretrain": "tests/data/google_records/pretrain.tfrecord (order: record "
                             "indices, file order)"},
        "orders": orders,
        "runs": runs,
    }
    text = json.dumps(golden, indent=1)  # then each list of numbers on one line
    text = re.sub(r"\[\s+([-+.,0-9e\s]+?)\s+\]", lambda m: f"[{' '.join(m.group(1).split())}]",
                  text)
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    np.savez_compressed(os.path.join(OUT, "final_weights.npz"), **weights)
    heads.print_written(OUT)


if __name__ == "__main__":
    main()
