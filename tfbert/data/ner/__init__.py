"""NER data: examples from CoNLL files and the built-in People's Daily NER (`readers`), and their
labels aligned to word pieces, long sentences as windows, and back (`features`).

    from tfbert.data import ner
    train = ner.people_daily_ner("train")
    features = ner.encode_examples(train, tokenizer, max_seq_length=64, labels=labels)
"""

from tfbert.data.ner.features import (
    IGNORE_INDEX,
    LABEL_ALIGNMENTS,
    NerFeatures,
    check_windows,
    decode_logits,
    decode_predictions,
    encode_examples,
    make_dataset,
    piece_logits,
)
from tfbert.data.ner.readers import (
    CHAR_LEVEL_SHARE,
    PEOPLE_DAILY_LABELS,
    PEOPLE_DAILY_TYPES,
    NerExample,
    check_char_level,
    label_list,
    people_daily_ner,
    read_conll,
    tag_ids,
)

__all__ = ["CHAR_LEVEL_SHARE", "IGNORE_INDEX", "LABEL_ALIGNMENTS", "LONG_INPUTS",
           "PEOPLE_DAILY_LABELS", "PEOPLE_DAILY_TYPES", "NerExample", "NerFeatures",
           "check_char_level", "check_windows", "decode_logits", "decode_predictions",
           "encode_examples", "label_list", "make_dataset", "people_daily_ner", "piece_logits",
           "read_conll", "tag_ids"]
