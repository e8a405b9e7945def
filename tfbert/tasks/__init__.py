"""One library call per command line: run_classification, run_ner, run_qa.

Each `tfbert.tasks.<task>` module holds a config dataclass (the script's flags) and the function
the script calls, so a test or a notebook can run the same thing with a tiny config.
"""

from tfbert._lazy import lazy_names

# The task modules load on first use (`tfbert.tasks.ner`), keeping `import tfbert.tasks` cheap.
__getattr__, __dir__ = lazy_names(__name__, globals(), {})
