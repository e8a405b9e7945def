"""Quality and training-dynamics studies (not speed): fine-tuning from random init against the
default pretraining beside the simplest baselines (`quality`, `baselines`), tfbert's masked-LM
curve against transformers' on the same batches (`mlm_dynamics`), and what a pretrained
checkpoint has learned (`inspect_pretrained`).

    python -m bench.studies.quality --only baseline   # the baselines alone (minutes)
"""
