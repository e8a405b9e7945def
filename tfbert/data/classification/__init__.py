"""Text classification data: files (`readers`), built-in tasks and TensorFlow Datasets
(`builtin`), labels and class weights (`labels`), and batches or windows for the model
(`features`).

    from tfbert.data import classification as data
    train = data.builtin_examples("sentiment", "train")
    ds = data.make_dataset(train, preprocessor, data.label_list(train), batch_size=32)
"""

from tfbert.data.classification.builtin import (
    BUILTIN_TASKS,
    ENTITY_TYPE_LABELS,
    MULTI_LABEL_TASKS,
    SENTIMENT_LABELS,
    builtin_examples,
    builtin_labels,
    tfds_examples,
)
from tfbert.data.classification.features import (
    WindowFeatures,
    encode_windows,
    make_dataset,
    make_window_dataset,
    pack_windows,
)
from tfbert.data.classification.labels import (
    check_near_duplicate_labels,
    class_weights,
    is_labelled,
    label_ids,
    label_list,
    label_matrix,
)
from tfbert.data.classification.readers import (
    COLUMNS,
    MULTI_LABEL_COLUMNS,
    ClassificationExample,
    column_name,
    read_examples,
)

__all__ = ["BUILTIN_TASKS", "COLUMNS", "ENTITY_TYPE_LABELS", "MULTI_LABEL_COLUMNS",
           "MULTI_LABEL_TASKS", "SENTIMENT_LABELS", "ClassificationExample", "WindowFeatures",
           "builtin_examples", "builtin_labels", "check_near_duplicate_labels", "class_weights",
           "column_name", "encode_windows", "is_labelled", "label_ids", "label_list",
           "label_matrix", "make_dataset", "make_window_dataset", "pack_windows",
           "read_examples", "tfds_examples"]
