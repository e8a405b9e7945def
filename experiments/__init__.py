"""One-question experiments and one-off studies behind docs/performance.md and docs/tasks.md;
the library, demo.py and the tests never import them.

Speed: interleaved A/Bs of one model piece (`ab_pretrain`, `ab_pretrain_builtin`, `ab_serve`,
`ab_versions`), profiles (`profile_pretrain`, `profile_serve`), microbenchmarks (`probe_matmul`,
`probe_attention`, `probe_fusions`), the fit loop and its feed (`fit_loop`, `fit_feed`), clip
costs (`clip_norms`, `clip_rows_cost`) and process-wide settings timed one child process per
setting (`serve_env`, `probe_streams`, `probe_frozen_weights`, `request_memory`).
Quality and training dynamics: the baselines alone (`baselines`), the fine-tuning kits
(`classifier_kit`, `ner_kit`, `grid_sentiment`, `ner_diagnosis`), the pretraining recipe
(`pretrain_recipe`), tfbert's masked-LM curve against transformers' (`mlm_dynamics`), what a
checkpoint learned (`inspect_pretrained`) and the agreement with google-research/bert's training
(`google_training_agreement`).

Run each from the repository root:

    python -m experiments.probe_matmul --help
"""
