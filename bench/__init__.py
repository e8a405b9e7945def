"""tfbert's benchmark suite: each benchmark times tfbert side by side with its peers in one run.

    python -m bench.run [--quick] [--bfloat16] [--rounds N] [--only pretrain,inference,...]

Run from the repository root. The suite's benchmarks (`bench_pretrain`, `bench_inference`,
`bench_tokenizer`, `bench_pipeline`, `bench_scaling`) live here with their shared helpers
(`common`) and `gpu_pretrain` (the GPU peer comparison under Keras's JAX backend, which imports
no TensorFlow). `bench.probes` holds one-question experiments (A/B variants, profiles, process
settings), `bench.studies` quality and training-dynamics studies. docs/performance.md gives each
decision with its measured effect and the command that shows it. This package imports nothing.
"""
