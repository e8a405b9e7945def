"""The regression head's export (`tfbert.models.regressor.BertRegressor`, GLUE STS-B): one score.

serving_default and serve_ids return score [B] float32, the model's prediction for each text
(or `text`, `text_b` pair when the model was trained on pairs); the TFLite models the same.
"""

from __future__ import annotations

from typing import Any

from tfbert.tasks.serving_base import SingleOutputHead


class RegressionHead(SingleOutputHead):
    name = "regression"
    text_b = "pair"
    output = "score"  # [B]

    @classmethod
    def spec_fields(cls, model: Any, metadata: dict[str, Any], model_dir: str) -> dict[str, Any]:
        return {**super().spec_fields(model, metadata, model_dir),
                "pair": bool(metadata.get("pair", False))}


HEAD = RegressionHead
