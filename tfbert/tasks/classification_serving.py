"""The classification head's export: logits, probabilities, the label (or a multi-label set).

serving_default and serve_ids return logits [B, C] float32, probabilities [B, C] float32,
label_ids [B] int32 and labels [B] string (label names); a multi-label model
(ExportSpec.multi_label) instead: logits [B, C], probabilities [B, C] (sigmoid), thresholds
[B, C] (the stored per-label thresholds), label_mask [B, C] int32 (1 where probability >=
threshold: the predicted label set) and labels [B, C] string (the label's name where predicted,
"" elsewhere). With long_input "windows" a text's logits are the mean of its windows'.
"""

from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

from tfbert.errors import UserError
from tfbert.tasks.serving_base import ServingHead

logger = logging.getLogger(__name__)


class ClassificationHead(ServingHead):
    name = "classification"
    text_b = "pair"
    needs_labels = True
    windows = True
    metadata_keys = ("long_input", "doc_stride")

    @classmethod
    def spec_fields(cls, model: Any, metadata: dict[str, Any], model_dir: str) -> dict[str, Any]:
        labels = metadata.get("labels") or [str(i) for i in range(model.num_classes)]
        if len(labels) != model.num_classes:
            raise UserError(f"{model_dir}: {len(labels)} labels in tfbert.json for a model "
                            f"with {model.num_classes} classes")
        fields = {**super().spec_fields(model, metadata, model_dir), "labels": labels,
                  "pair": bool(metadata.get("pair", False))}
        if getattr(model, "multi_label", False):  # its stored per-label thresholds
            thresholds = metadata.get("thresholds")
            if thresholds is None:
                logger.warning("%s: a multi-label model without thresholds in tfbert.json; "
                               "every label gets 0.5", model_dir)
                thresholds = [0.5] * len(labels)
            fields.update(multi_label=True, thresholds=[float(t) for t in thresholds])
        return fields

    @classmethod
    def check_spec(cls, spec: Any) -> None:
        if spec.multi_label and (spec.thresholds is None
                                 or len(spec.thresholds) != len(spec.labels)):
            raise UserError(f"saved_model.py: multi_label needs one threshold per label; got "
                            f"{len(spec.labels or [])} labels and thresholds {spec.thresholds}")

    def model_outputs(self, outputs: Any, seq_length: int) -> dict[str, tf.Tensor]:
        return {"logits": tf.cast(outputs, tf.float32)}

    def window_shapes(self) -> dict[str, list[int | None]]:
        return {"logits": [None, len(self.spec.labels)]}

    def decode(self, inputs: dict[str, tf.Tensor] | None, outputs: dict[str, tf.Tensor],
               chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        logits = outputs["logits"]  # [B, C]
        names = self.module.label_names
        if self.spec.multi_label:  # independent labels, each at its threshold
            probabilities = tf.sigmoid(logits)  # [B, C]
            thresholds = tf.broadcast_to(tf.constant(self.spec.thresholds, tf.float32),
                                         tf.shape(logits))  # [B, C]
            chosen = probabilities >= thresholds
            return {"logits": logits, "probabilities": probabilities, "thresholds": thresholds,
                    "label_mask": tf.cast(chosen, tf.int32),
                    "labels": tf.where(chosen, tf.broadcast_to(names, tf.shape(logits)), "")}
        label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B]
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_ids": label_ids, "labels": tf.gather(names, label_ids)}

    def merge_windows(self, outputs: dict[str, tf.Tensor], win: dict[str, tf.Tensor]
                      ) -> dict[str, tf.Tensor]:
        logits = tf.math.unsorted_segment_mean(outputs["logits"], win["row"],
                                               win["num_rows"])  # [B, C]
        return self.decode(None, {"logits": logits}, chars=None)

    @classmethod
    def tflite_outputs(cls, model: Any, spec: Any, inputs: dict[str, tf.Tensor], outputs: Any,
                       continuation: tf.Tensor) -> dict[str, tf.Tensor]:
        logits = tf.cast(outputs, tf.float32)
        if spec.multi_label:  # as the SavedModel's outputs, without the label strings
            probabilities = tf.sigmoid(logits)
            thresholds = tf.broadcast_to(tf.constant(spec.thresholds, tf.float32),
                                         tf.shape(logits))
            return {"logits": logits, "probabilities": probabilities, "thresholds": thresholds,
                    "label_mask": tf.cast(probabilities >= thresholds, tf.int32)}
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}


HEAD = ClassificationHead
