"""Keeps `from tfbert.tasks.squad import SquadConfig` working; the module is tfbert.tasks.qa."""

from tfbert.tasks.qa import (
    TASK,
    QAConfig,
    load_data,
    null_threshold_source,
    postprocess_predictions,
    predict_logits,
    run_qa,
    span_loss,
    write_predictions,
)

SquadConfig = QAConfig
run_squad = run_qa

__all__ = ["TASK", "QAConfig", "SquadConfig", "load_data", "null_threshold_source",
           "postprocess_predictions", "predict_logits", "run_qa", "run_squad", "span_loss",
           "write_predictions"]
