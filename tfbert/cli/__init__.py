"""The command lines: one module per command, each `main(argv)` with absl flags and `entry()`.

    pretrain     run_pretraining.py    tfbert-pretrain
    classifier   run_classifier.py     tfbert-classifier
    ner          run_ner.py            tfbert-ner
    squad        run_squad.py          tfbert-squad

The top-level run_*.py files are their shims (google-research/bert's command names, in a
checkout); pyproject.toml installs the tfbert-* commands. `common_flags` makes the flags from
the config dataclasses.
"""
