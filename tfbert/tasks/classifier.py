"""Keeps imports from tfbert.tasks.classifier working; the module is tfbert.tasks.classification."""

from tfbert.tasks.classification import (
    BEST_METRICS,
    MULTI_LABEL_BEST_METRICS,
    TASK,
    ClassificationConfig,
    check_doc_stride,
    load_data,
    run_classification,
)

ClassifierConfig = ClassificationConfig
run_classifier = run_classification

__all__ = ["BEST_METRICS", "MULTI_LABEL_BEST_METRICS", "TASK", "ClassificationConfig",
           "ClassifierConfig", "check_doc_stride", "load_data", "run_classification",
           "run_classifier"]
