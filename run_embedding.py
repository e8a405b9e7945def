"""run_embedding.py: a shim for tfbert/cli/embedding.py, which holds the command and its --help
(installed as `tfbert-embedding`)."""

from tfbert.cli.embedding import entry

if __name__ == "__main__":
    entry()
