"""run_pretraining.py, google-research/bert's command name: a shim for tfbert/cli/pretrain.py,
which holds the command and its --help (installed as `tfbert-pretrain`)."""

from tfbert.cli.pretrain import entry

if __name__ == "__main__":
    entry()
