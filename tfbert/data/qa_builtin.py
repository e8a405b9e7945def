"""The built-in Chinese QA set: cloze questions about People's Daily's named entities (`nr`
person, `ns` place, `nt` organisation; made by `tfbert.data.qa_cloze`), each in the split of its
paragraph (`tfbert.data.splits`: near-copies in one split). `write_builtin_qa` writes it as
SQuAD JSON, so runs read it through the same reader as any other file.

    examples = builtin_qa_examples("train")
    paths = write_builtin_qa("data/qa")   # {"train": ".../train.json", ...}
"""

from __future__ import annotations

import dataclasses
import os

from tfbert.data import qa_cloze, splits
from tfbert.data.squad import QAExample, write_squad_json

BUILTIN_SPLITS = ("train", "dev", "test")


def builtin_qa_examples(split: str, version_2_with_negative: bool = False) -> list[QAExample]:
    """The built-in Chinese QA examples of one split ("train", "dev" or "test").

    Args:
        split: str. Which split (its paragraph's: `tfbert.data.splits`).
        version_2_with_negative: bool. Make about a third of the questions unanswerable (SQuAD
            v2.0 style): their context is swapped for another paragraph of the same split that
            does not contain the answer, and they are marked `is_impossible`.

    Returns:
        list of QAExample, deterministic across runs and machines.
    """
    if split not in BUILTIN_SPLITS:
        raise ValueError(f"split must be one of {BUILTIN_SPLITS}, got {split!r}")
    line_splits = splits.people_daily_line_splits()
    examples = [QAExample(qas_id, question, context, [{"text": text, "answer_start": start}],
                          title="people_daily_199801")
                for qas_id, question, context, text, start, line in qa_cloze.cloze_questions()
                if line_splits[line] == split]
    if not version_2_with_negative:
        return examples
    out = []
    for i, ex in enumerate(examples):
        if qa_cloze.hash_int("negative:" + ex.qas_id) % 3 != 0:
            out.append(ex)
            continue
        answer = ex.answers[0]["text"]
        for k in range(1, len(examples)):  # the next paragraph that does not hold the answer
            other = examples[(i + k) % len(examples)].context
            if answer not in other:
                out.append(dataclasses.replace(ex, context=other, answers=[], is_impossible=True))
                break
        else:
            out.append(ex)
    return out


def write_builtin_qa(directory: str, version_2_with_negative: bool = False) -> dict[str, str]:
    """Writes the built-in QA set as SQuAD JSON files {split}.json; returns split -> path."""
    version = "v2.0" if version_2_with_negative else "v1.1"
    return {split: write_squad_json(builtin_qa_examples(split, version_2_with_negative),
                                    os.path.join(directory, f"{split}.json"), version)
            for split in BUILTIN_SPLITS}
