"""Where batch-1 serving time goes: the exported SavedModel's `serve_ids` against the Keras model
in a plain tf.function (same weights, interleaved), then a TensorFlow profiler trace of
`serve_ids` summed by op type.

    python -m experiments.profile_serve [--batch 1] [--rounds 10] [--inter_op 0] [--intra_op 0]
                                  [--dtype float32|bfloat16] [--cpu_streams 1] [--top 20]

--inter_op/--intra_op set TensorFlow's thread pools before anything runs (0: TF's default), to
see what the executor's inter-op parallelism costs a batch-1 request on few cores.
--cpu_streams exports with ExportSpec.cpu_streams (run it with --intra_op 1 --inter_op S).
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--inter_op", type=int, default=0)
    parser.add_argument("--intra_op", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--cpu_streams", type=int, default=1)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--logdir", default="/tmp/tfbert_serve_profile")
    args = parser.parse_args()
    import tensorflow as tf

    if args.inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    if args.intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op)

    import tfbert
    from bench.bench_inference import SEQ, build_tfbert, make_inputs
    from bench.common import interleaved_medians, op_times
    from tfbert.export import export_model

    workdir = tempfile.mkdtemp()
    model_dir = build_tfbert(workdir)
    export_dir = os.path.join(workdir, "saved_models", "bench", "1")
    export_model(model_dir, export_dir, check=False, dtype=args.dtype,
                 cpu_streams=args.cpu_streams)
    serve_ids = tf.saved_model.load(export_dir).signatures["serve_ids"]
    model = tfbert.checkpoints.load_model(model_dir)
    spec = {k: tf.TensorSpec([None, SEQ], tf.int32) for k in ("input_ids", "input_mask",
                                                               "segment_ids")}
    forward = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    x = {k: tf.constant(v) for k, v in make_inputs(args.batch).items()}
    calls = {f"SavedModel serve_ids ({args.dtype})": lambda: serve_ids(**x)["logits"].numpy(),
             "Keras model in tf.function (float32)": lambda: forward(x).numpy()}
    for name, t in interleaved_medians(calls, args.rounds).items():
        print(f"{name:<40} {t * 1e3:8.1f} ms (median of {args.rounds})")

    tf.profiler.experimental.start(args.logdir)
    for _ in range(3):
        serve_ids(**x)["logits"].numpy()
    tf.profiler.experimental.stop()
    totals = op_times(args.logdir)
    whole = sum(totals.values())
    print(f"\nserve_ids op time (host threads, summed over threads), {whole / 3e3:.1f} ms/call")
    print(f"{'op type':<40} {'ms/call':>9} {'share':>6}")
    for name, us in totals.most_common(args.top):
        print(f"{name:<40} {us / 3e3:>9.1f} {us / whole:>6.1%}")


if __name__ == "__main__":
    main()
