"""Task metrics: classification (accuracy, macro-F1, per class) and NER (entity-level, exact match).

SQuAD metrics live in `tfbert.evaluation.squad`, the QA answer-span search in
`tfbert.evaluation.spans` (TensorFlow).
"""

from tfbert.evaluation.classification import classification_metrics, f1_from_counts
from tfbert.evaluation.ner import Entity, entity_metrics, entity_spans, get_entities

__all__ = ["Entity", "classification_metrics", "entity_metrics", "entity_spans",
           "f1_from_counts", "get_entities"]
