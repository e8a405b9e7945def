"""Makes the Google fine-tuned-head fixtures with google-research/bert's own code (TF1 graph).

Run from the repo root (needs only TensorFlow and the google-research/bert mirror, a bare git
directory fetched with the `fetch` tool, github:google-research/bert):

    .venv/bin/python tests/make_google_head_golden.py [BERT_GIT_DIR]

BERT_GIT_DIR defaults to /work/.mirror/google-research+bert/repo; the code is read from commit
eedf5716ce1268e56f0a50264a88cafad334ac61 (`git show COMMIT:modeling.py`, ...), not copied here.
modeling.py runs unchanged under `tensorflow.compat.v1` in graph mode; TF2 lacks the two calls
it makes outside compat.v1, so the script gives it `tf.layers.dense` and
`tf.contrib.layers.layer_norm` written with compat.v1 variables under the same names
(`<scope>/kernel`, `<scope>/bias`; `LayerNorm/beta`, `LayerNorm/gamma`, epsilon 1e-12).
`create_model` of run_classifier.py and of run_squad.py is taken from those files and run as
is.

It writes tests/data/google_heads/
  classifier/   bert_config.json (hidden 32, 2 layers, 4 heads, Google "gelu" = tanh form),
                vocab.txt (tests/data/tiny_pretraining's), bert_model.ckpt.* of run_classifier's
                create_model with num_labels=3 (encoder + `output_weights` [3, 32] +
                `output_bias` [3])
  squad/        the same for run_squad's create_model (`cls/squad/output_weights` [2, 32],
                `cls/squad/output_bias` [2])
  golden.npz    a fixed batch (input_ids, input_mask, segment_ids) and the graphs' outputs
                with is_training=False: classifier_logits [B, 3], start_logits / end_logits
                [B, T]

Every variable is drawn at random (seed 0, non-zero biases and LayerNorm parameters) so all of
them are tested. Rerun only when the inputs change.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
OUT = os.path.join(DATA, "google_heads")
VOCAB = os.path.join(DATA, "tiny_pretraining", "vocab.txt")
BERT_GIT = "/work/.mirror/google-research+bert/repo"
COMMIT = "eedf5716ce1268e56f0a50264a88cafad334ac61"
CONFIG = {"vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
          "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02}
NUM_LABELS = 3


def _blob(git_dir: str, name: str) -> str:
    return subprocess.run(["git", "-C", git_dir, "show", f"{COMMIT}:{name}"], check=True,
                          capture_output=True, text=True).stdout


def _function(source: str, name: str) -> str:
    """The text of top-level function `name` in a module's source."""
    match = re.search(rf"^def {name}\(.*?(?=^def |\Z)", source, re.S | re.M)
    if not match:
        raise SystemExit(f"no function {name} in the source")
    return match.group(0)


def _tf_shim(v1):
    """compat.v1 plus the two TF1 calls modeling.py makes that TF2 no longer has."""

    def dense(inputs, units, activation=None, name=None, kernel_initializer=None):
        with v1.variable_scope(name, default_name="dense"):
            width = inputs.shape[-1]
            width = getattr(width, "value", width)
            kernel = v1.get_variable("kernel", [width, units], initializer=kernel_initializer)
            bias = v1.get_variable("bias", [units], initializer=v1.zeros_initializer())
            out = v1.nn.bias_add(v1.matmul(inputs, kernel), bias)  # modeling.py's are 2-D
            return activation(out) if activation is not None else out

    def layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None):
        assert begin_norm_axis == -1 and begin_params_axis == -1
        with v1.variable_scope(scope, default_name="LayerNorm"):
            width = inputs.shape[-1]
            width = getattr(width, "value", width)
            beta = v1.get_variable("beta", [width], initializer=v1.zeros_initializer())
            gamma = v1.get_variable("gamma", [width], initializer=v1.ones_initializer())
            mean, variance = v1.nn.moments(inputs, [-1], keep_dims=True)
            return v1.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma,
                                             variance_epsilon=1e-12)

    class Shim(types.ModuleType):
        def __getattr__(self, name):
            return getattr(v1, name)

    shim = Shim("tf_compat_v1_shim")
    shim.layers = types.SimpleNamespace(dense=dense)
    shim.contrib = types.SimpleNamespace(layers=types.SimpleNamespace(layer_norm=layer_norm))
    return shim


def _batch() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    batch_size, seq_length = 3, 12
    lengths = np.array([12, 9, 5])
    mask = (np.arange(seq_length)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, CONFIG["vocab_size"], (batch_size, seq_length)).astype(np.int32)
    ids[:, 0] = 2  # [CLS]
    ids *= mask
    segments = ((np.arange(seq_length)[None] >= lengths[:, None] // 2) * mask).astype(np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def _build(kind: str, git_dir: str, batch: dict) -> dict[str, np.ndarray]:
    import tensorflow as tf

    v1 = tf.compat.v1
    shim = _tf_shim(v1)
    modeling = types.ModuleType("modeling")
    exec(compile(_blob(git_dir, "modeling.py"), f"bert@{COMMIT[:7]}/modeling.py", "exec"),
         modeling.__dict__)
    modeling.tf = shim  # its functions look `tf` up at call time
    script = "run_classifier.py" if kind == "classifier" else "run_squad.py"
    namespace = {"tf": shim, "modeling": modeling}
    exec(compile(_function(_blob(git_dir, script), "create_model"),
                 f"bert@{COMMIT[:7]}/{script}", "exec"), namespace)
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        inputs = {k: v1.constant(v) for k, v in batch.items()}
        config = modeling.BertConfig.from_dict(CONFIG)
        common = dict(bert_config=config, is_training=False, input_ids=inputs["input_ids"],
                      input_mask=inputs["input_mask"], segment_ids=inputs["segment_ids"],
                      use_one_hot_embeddings=False)
        if kind == "classifier":
            _, _, logits, _ = namespace["create_model"](labels=v1.zeros([3], tf.int32),
                                                        num_labels=NUM_LABELS, **common)
            outputs = {"classifier_logits": logits}
        else:
            start, end = namespace["create_model"](**common)
            outputs = {"start_logits": start, "end_logits": end}
        variables = v1.global_variables()
        rng = np.random.default_rng(0)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            for variable in variables:  # every value random, biases and LayerNorm included
                shape = variable.shape.as_list()
                value = session.run(variable)
                if re.search(r"(bias|beta|gamma)$", variable.op.name):
                    value = value + 0.1 * rng.standard_normal(shape)
                variable.load(value.astype(np.float32), session)
            target = os.path.join(OUT, kind)
            os.makedirs(target, exist_ok=True)
            v1.train.Saver(variables).save(session, os.path.join(target, "bert_model.ckpt"),
                                           write_meta_graph=False)
            os.remove(os.path.join(target, "checkpoint"))  # it holds absolute paths
            with open(os.path.join(target, "bert_config.json"), "w", encoding="utf-8") as f:
                json.dump(CONFIG, f, indent=2, sort_keys=True)
                f.write("\n")
            shutil.copyfile(VOCAB, os.path.join(target, "vocab.txt"))
            return {k: np.asarray(v) for k, v in session.run(outputs).items()}


def main() -> None:
    git_dir = sys.argv[1] if len(sys.argv) > 1 else BERT_GIT
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    batch = _batch()
    out = dict(batch)
    for kind in ("classifier", "squad"):
        out.update(_build(kind, git_dir, batch))
    out["commit"] = np.array(COMMIT)
    out["versions"] = np.array(f"tensorflow {tf.__version__}")
    np.savez_compressed(os.path.join(OUT, "golden.npz"), **out)
    print_written(OUT)


def print_written(folder: str) -> None:
    """Each file under `folder` with its size, as the fixture's commit will show it."""
    for root, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            path = os.path.join(root, name)
            print(os.path.relpath(path, DATA), os.path.getsize(path))


if __name__ == "__main__":
    main()
