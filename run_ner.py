"""run_ner.py, google-research/bert's command name: a shim for tfbert/cli/ner.py,
which holds the command and its --help (installed as `tfbert-ner`)."""

from tfbert.cli.ner import entry

if __name__ == "__main__":
    entry()
