"""The command lines: one module per command, each `main(argv)` and `entry()`.

    pretrain                 run_pretraining.py                     tfbert-pretrain
    classifier               run_classifier.py                      tfbert-classifier
    ner                      run_ner.py                             tfbert-ner
    squad                    run_squad.py                           tfbert-squad
    build_vocab              data_tools/build_vocab.py              tfbert-build-vocab
    create_pretraining_data  data_tools/create_pretraining_data.py  tfbert-create-pretraining-data

The first four take absl flags (`common_flags` makes them from the config dataclasses), the
data tools argparse flags; all use google-research/bert's flag names. The run_*.py and
data_tools/ files are their shims (google-research/bert's command names, in a checkout);
pyproject.toml installs the tfbert-* commands, and tfbert-export (tfbert/export/__main__.py,
also `python -m tfbert.export`).
"""
