"""run_squad.py, google-research/bert's command name: a shim for tfbert/cli/squad.py,
which holds the command and its --help (installed as `tfbert-squad`)."""

from tfbert.cli.squad import entry

if __name__ == "__main__":
    entry()
