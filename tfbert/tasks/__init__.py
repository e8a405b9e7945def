"""The tasks, one module each: classification, regression (STS-B), ner, qa, embedding, and the
encoder and pretraining tasks (tfbert/tasks/pretraining.py).

Each `tfbert.tasks.<task>` module holds a config dataclass (the script's flags), the function
the script calls (run_classification, run_regression, run_ner, run_qa, run_embedding), so a test
or a notebook can run the same thing with a tiny config, and its `TASK` declaration
(`tfbert.tasks.base.Task`), which `tfbert.tasks.registry` collects. A task's serving head sits
beside it (tfbert/tasks/*_serving.py, on serving_base.py); no task module imports another's
(tests/test_layout.py).

Distillation is not a task of its own but a way to train one: `tfbert.tasks.distill`
(run_distill, behind run_distill.py) trains a small student of a fine-tuned classification or
NER model, with that task's data fields (`tfbert.tasks.distill_tasks`).
"""

from tfbert._lazy import lazy_names

# The task modules load on first use (`tfbert.tasks.ner`), keeping `import tfbert.tasks` cheap.
__getattr__, __dir__ = lazy_names(__name__, globals(), {})
