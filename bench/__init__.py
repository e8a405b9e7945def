"""tfbert's benchmark suite: each benchmark times tfbert side by side with its peers in one run.

    python -m bench.run [--quick] [--bfloat16] [--rounds N] [--only pretrain,inference,...]
    python -m bench.report          # docs/results.md from bench/results/*.json

Run from the repository root. The suite's benchmarks (`bench_pretrain`, `bench_inference`,
`bench_tokenizer`, `bench_pipeline`, `bench_scaling`) live here with their shared helpers
(`common`), `gpu_pretrain` (the GPU peer comparison under Keras's JAX backend, which imports
no TensorFlow), `quality` (the fine-tuning quality table against the simplest baselines) and
`report` (the measured tables of docs/results.md). One-question experiments and one-off studies
live in experiments/. docs/performance.md gives each decision with its current figure and the
command that shows it. This package imports nothing.
"""
