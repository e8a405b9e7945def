"""run_classifier.py, google-research/bert's command name: a shim for tfbert/cli/classifier.py,
which holds the command and its --help (installed as `tfbert-classifier`)."""

from tfbert.cli.classifier import entry

if __name__ == "__main__":
    entry()
