"""tfbert-export --model_dir=DIR --export_dir=saved_models/NAME [--tflite=...]

Writes a TF Serving SavedModel (raw text in) as the next version of saved_models/NAME (or into
saved_models/NAME/VERSION), checks its ops against TF Serving 2.12 and 2.20, and optionally
writes TFLite files (sizes and batch-1 latencies are printed). --model_dir is a model directory
or a fine-tuning or pretraining run's --output_dir (its model/ folder is exported; a pretrained
model exports its encoder). It writes only what it owns: an earlier export is replaced only with
--overwrite (the files in it that tfbert did not write are kept), anything else in the way is an
error, and so is a model folder another export is writing (exit 2). `python -m tfbert.export` is
the same command.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from tfbert.devices import list_devices
from tfbert.errors import UserError, run_cli
from tfbert.export import export_model
from tfbert.export.target_cpu import TARGET_CPUS

PROG = "python -m tfbert.export"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """The command line; a user's mistake is one line on stderr and exit status 2.

    Args:
        argv: list of str or None. The flags (None: sys.argv[1:]).
        prog: str. The command's name in --help and in error lines.

    Returns:
        0 when the SavedModel passes the TF Serving op check, else 1.
    """
    return run_cli(_main, argv, prog, prog=prog)


def entry() -> None:
    """The console command `tfbert-export` (pyproject.toml's [project.scripts])."""
    sys.exit(main(prog="tfbert-export"))


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command's flags; every --help line states its default."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--model_dir", required=True,
                        help="fine-tuned or pretrained model directory (with vocab.txt), or a "
                             "run's --output_dir holding one as model/ (required)")
    parser.add_argument("--export_dir", required=True,
                        help="the model's folder, e.g. saved_models/sentiment (the export "
                             "becomes its next version), or a version folder in it, e.g. "
                             "saved_models/sentiment/1 (required)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier tfbert export in the version folder, keeping "
                             "the files there that tfbert did not write (and the TFLite files "
                             "tfbert wrote) (default: refuse)")
    parser.add_argument("--tflite", default="",
                        help="comma-separated quantizations: float32, float16 (float16 "
                             "weights), int8 (dynamic range: int8 matmul weights, float "
                             "activations; docs/serving.md) (default: none, no TFLite files)")
    parser.add_argument("--tflite_dir", default=None,
                        help="where .tflite files go (default: saved_models/NAME/tflite)")
    parser.add_argument("--no_text_tflite", action="store_true",
                        help="write only the ids-in TFLite models (default: ids-in and "
                             "text-in)")
    parser.add_argument("--max_seq_length", type=int, default=None,
                        help="override the saved max_seq_length (default: the saved one; with "
                             "none saved, 128 or max_position_embeddings if smaller)")
    parser.add_argument("--pair", action=argparse.BooleanOptionalAction, default=None,
                        help="classification on sentence pairs (text_b input) (default: the "
                             "model's tfbert.json \"pair\", false when absent)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="SavedModel precision: bfloat16 runs the matmuls in bfloat16 "
                             "(fast on CPUs with AMX/AVX512-BF16 and on GPUs) (default: "
                             "%(default)s)")
    parser.add_argument("--target_cpu", default="auto", choices=TARGET_CPUS,
                        help="the serving CPU: avx2 (no AVX-512), avx512, amx (AMX bfloat16); "
                             "picks the graph forms and the --jit_compile / --cpu_streams "
                             "defaults measured fastest there (docs/performance.md) (default: "
                             "%(default)s, this host's kind)")
    parser.add_argument("--jit_compile", action=argparse.BooleanOptionalAction, default=None,
                        help="XLA-compile the model's forward in the signatures (TF Serving "
                             "then needs --xla_cpu_compilation_enabled=true) (default: "
                             "--target_cpu's choice)")
    parser.add_argument("--no_trim_padding", action="store_true",
                        help="run every request at the full max_seq_length instead of up to "
                             "the batch's last attended position (default: trim)")
    parser.add_argument("--cpu_streams", type=int, default=None,
                        help="cut each transformer block into this many streams for CPU "
                             "serving with one intra-op thread and this many inter-op "
                             "threads (docs/serving.md); 1: the plain graph (default: "
                             "--target_cpu's choice)")
    parser.add_argument("--max_request_chars", type=int, default=None,
                        help="the most characters of text one serving_default request may "
                             "hold; a larger one is refused (docs/serving.md, \"Request "
                             "size\"); 0: no limit (default: 1000000)")
    return parser


def tflite_quantizations(value: str) -> tuple[str, ...]:
    """The --tflite value as quantization names, each once, in the order given; UserError for
    a name the TFLite export does not know (before any model is loaded)."""
    names = tuple(dict.fromkeys(q.strip() for q in value.split(",") if q.strip()))
    if not names:
        return ()
    # the converter's module (TensorFlow) loads only when TFLite files are asked for
    from tfbert.export.tflite import QUANTIZATIONS

    unknown = [q for q in names if q not in QUANTIZATIONS]
    if unknown:
        raise UserError(f"--tflite {value!r}: unknown quantization {unknown[0]!r}; use a "
                        f"comma-separated list of {', '.join(QUANTIZATIONS)}")
    return names


def _main(argv: list[str] | None, prog: str) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    list_devices()  # once, before any work (tfbert/devices.py: why)
    tflite = tflite_quantizations(args.tflite)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result = export_model(
        args.model_dir, args.export_dir, tflite=tflite,
        tflite_dir=args.tflite_dir, text_tflite=not args.no_text_tflite,
        max_seq_length=args.max_seq_length, pair=args.pair, dtype=args.dtype,
        jit_compile=args.jit_compile, trim_padding=not args.no_trim_padding,
        cpu_streams=args.cpu_streams, overwrite=args.overwrite, target_cpu=args.target_cpu,
        max_request_chars=args.max_request_chars)
    out = sys.stdout
    out.write(f"SavedModel: {result['export_dir']} (version {result['version']}"
              f"{', replacing the earlier export' if result['replaced'] else ''}; task "
              f"{result['task']}, max_seq_length {result['max_seq_length']}, "
              f"{result['dtype']})\n")
    out.write(f"  for {result['target_cpu']} CPUs: forms {result['forms']}, jit_compile "
              f"{result['jit_compile']}, cpu_streams {result['cpu_streams']}\n")
    for name, sig in result["signatures"].items():
        out.write(f"  {name}: {', '.join(sig['inputs'])} -> {', '.join(sig['outputs'])}\n")
    if result["cpu_streams"] > 1:
        out.write(f"  serve with one intra-op and {result['cpu_streams']} inter-op threads: "
                  f"tensorflow_model_server --tensorflow_intra_op_parallelism=1 "
                  f"--tensorflow_inter_op_parallelism={result['cpu_streams']} ...\n")
    out.write(result["serving_check"]["report"] + "\n")
    for info in result.get("tflite", {}).values():
        out.write(f"{info['path']}: {info['bytes'] / 1024:.1f} KiB, {info['latency_ms']:.2f} ms "
                  f"(batch 1, median of 10), custom ops: {info['custom_ops'] or 'none'}\n")
    logging.getLogger(__name__).debug(json.dumps(result, default=str))
    return 0 if result["serving_check"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
