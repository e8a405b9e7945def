"""Task metrics: classification (accuracy, macro-F1, per class) and NER (entity-level, exact match).

SQuAD metrics live in `tfbert.evaluation.squad`, the QA answer-span search in
`tfbert.evaluation.spans` (TensorFlow), STS-B's in `tfbert.evaluation.regression`. What a
classifier's logits become and the files run_classifier writes (shared by classification,
regression and distillation) are in `tfbert.evaluation.classification_outputs`.
"""

from tfbert.data.tags import Entity, get_entities
from tfbert.evaluation.classification import classification_metrics, f1_from_counts
from tfbert.evaluation.ner import entity_metrics, entity_spans

__all__ = ["Entity", "classification_metrics", "entity_metrics", "entity_spans",
           "f1_from_counts", "get_entities"]
