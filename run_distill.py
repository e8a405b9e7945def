"""run_distill.py: a shim for tfbert/cli/distill.py, which holds the command and its --help
(installed as `tfbert-distill`)."""

from tfbert.cli.distill import entry

if __name__ == "__main__":
    entry()
