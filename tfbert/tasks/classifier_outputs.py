"""Keeps imports from this path working; the module is tfbert.tasks.classification_outputs."""

from tfbert.tasks.classification_outputs import (
    cross_entropy,
    predict,
    predict_logits,
    sigmoid,
    softmax,
    write_eval_results,
    write_multi_label_predictions,
    write_predictions,
    write_test_results,
)

__all__ = ["cross_entropy", "predict", "predict_logits", "sigmoid", "softmax",
           "write_eval_results", "write_multi_label_predictions", "write_predictions",
           "write_test_results"]
