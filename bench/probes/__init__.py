"""One-question experiments behind docs/performance.md: interleaved A/Bs of one model piece
(`ab_pretrain`, `ab_serve`), profiles (`profile_pretrain`, `profile_serve`), microbenchmarks
(`probe_matmul`, `probe_attention`, `probe_fusions`) and process-wide settings timed one child
process per setting (`serve_env`, `probe_streams`, `probe_frozen_weights`).

    python -m bench.probes.probe_matmul --help
"""
