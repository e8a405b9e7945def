"""Keeps imports from this path working; the module is tfbert.tasks.qa_predictions."""

from tfbert.tasks.qa_predictions import (
    NBEST_KEYS,
    NO_SPAN_TEXT,
    SpanPrediction,
    decode_example,
    postprocess_predictions,
    write_predictions,
)

__all__ = ["NBEST_KEYS", "NO_SPAN_TEXT", "SpanPrediction", "decode_example",
           "postprocess_predictions", "write_predictions"]
