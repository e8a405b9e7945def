"""SQuAD v1.1 / v2.0 JSON and CMRC 2018's two layouts: reading, checking and writing.

CMRC 2018 (Chinese) comes in SQuAD's layout (the CLUE release: train.json, dev.json, with
paragraph and article ids, which are ignored, and several answers per dev question) and in the
layout of its first release (cmrc2018_train/dev/trial.json): a JSON list of
`{"context_id", "context_text", "title", "qas": [{"query_id", "query_text", "answers": [text,
...]}]}` without answer offsets. Both read into the same examples; answer_start counts
characters (Python string indices), as SQuAD's does. The first layout's answers are placed at
the first occurrence of their text in the context and counted ("located_answer").

Reading. `read_squad_json(path)` returns a `SquadData` (examples + the problems it found). Every
answer is checked against its context (`context[answer_start:answer_start + len(text)] == text`).
A mismatch is either an error naming the file and question id (`on_bad_answer="error"`) or a counted
warning (`"warn"`, the default): the answer is moved to the occurrence of its text nearest to the
given `answer_start` ("repaired_answer"), or, when the text is not in the context at all, the
question is kept for scoring by text but not trained on ("unmatched_answer"). A question whose
text is empty or blank is not trained on; in dev/test it is predicted (from the context alone)
and scored like any other, as SQuAD's evaluation script counts every question
("empty_question"). Nothing is dropped silently; `SquadData.problems` lists the ids by kind and
run_qa's results.json counts them under "data". A file without any question, a question or
context that is not a JSON string, and a malformed structure are errors naming the file.

Windowing examples into model features is `tfbert.data.qa_features`; the built-in Chinese QA
set is `tfbert.data.qa_builtin`.

    data = read_squad_json("dev-v1.1.json")
    features, stats = qa_features.convert_examples(
        data.examples, tfbert.BertTokenizer("vocab.txt"), max_seq_length=384, doc_stride=128,
        max_query_length=64)
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from tfbert import textfiles
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

ON_BAD_ANSWER = ("error", "warn")
# Problems a reader reports (kind -> meaning).
PROBLEM_KINDS = {
    "repaired_answer": "answer_start did not point at the answer text; moved to the nearest "
                       "occurrence of the text in the context",
    "unmatched_answer": "answer text is not in the context; scored by text, not trained on",
    "missing_answers": "no answers and not marked is_impossible; predicted but not scored",
    "located_answer": "the file gives no answer_start (CMRC 2018's first layout); placed at the "
                      "first occurrence of the text in the context",
    "empty_question": "the question text is empty or blank; not trained on, but predicted (from "
                      "the context alone) and scored in dev/test",
}


@dataclasses.dataclass
class QAExample:
    """One question about one context.

    Args:
        qas_id: str. The question id (the key of predictions.json).
        question: str. The question text.
        context: str. The paragraph the answer is taken from.
        answers: list of dict. Gold answers `{"text": str, "answer_start": int}` (character offset
            into `context`); the first one is the training target.
        is_impossible: bool. SQuAD v2.0: the context does not answer the question.
        trainable: bool. False when the example is no training target: its first answer could
            not be located in the context, or its question is blank.
        title: str. The article title (informational).
    """

    qas_id: str
    question: str
    context: str
    answers: list[dict[str, Any]]
    is_impossible: bool = False
    trainable: bool = True
    title: str = ""

    @property
    def has_gold(self) -> bool:
        """Whether the example can be scored (it has answers or is marked unanswerable)."""
        return self.is_impossible or bool(self.answers)

    @property
    def answer_char_span(self) -> tuple[int, int] | None:
        """[start, end) character span of the first answer, or None (no answer / not trainable)."""
        if self.is_impossible or not self.answers or not self.trainable:
            return None
        first = self.answers[0]
        return first["answer_start"], first["answer_start"] + len(first["text"])


@dataclasses.dataclass
class SquadData:
    """The examples of one file and the problems found while reading it (kind -> question ids)."""

    examples: list[QAExample]
    version: str = ""
    problems: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def problem_counts(self) -> dict[str, int]:
        return {kind: len(ids) for kind, ids in self.problems.items()}


# --- reading and writing SQuAD JSON ----------------------------------------------------------


def _locate_answer(context: str, text: str, answer_start: int) -> int | None:
    """Start of the occurrence of `text` in `context` nearest to `answer_start`, or None."""
    if not text:
        return None
    starts, i = [], context.find(text)
    while i != -1:
        starts.append(i)
        i = context.find(text, i + 1)
    if not starts:
        return None
    return min(starts, key=lambda s: (abs(s - answer_start), s))


def read_squad_json(path: str, on_bad_answer: str = "warn",
                    encoding: str = textfiles.DEFAULT_ENCODING) -> SquadData:
    """Reads a SQuAD v1.1 / v2.0 (or CMRC2018) JSON file.

    Args:
        path: str. The JSON file: `{"version": ..., "data": [{"title": ..., "paragraphs":
            [{"context": ..., "qas": [{"id", "question", "answers", ["is_impossible"]}]}]}]}`.
        on_bad_answer: str. "error": an answer whose text is not at its answer_start raises a
            ValueError naming the file and question id. "warn": such answers are repaired or
            marked untrainable and counted in `SquadData.problems` (see the module docstring).
        encoding: str. The file's text encoding (`--input_encoding`). The file is read through
            `tfbert.textfiles`: a byte-order mark is dropped, and any byte that does not decode
            is an error naming the line, byte offset and flag to pass.

    Returns:
        SquadData with the examples in file order.

    Raises:
        UserError: undecodable bytes, invalid JSON (named by line and column), a malformed
            structure, or (with on_bad_answer="error") an answer not at its answer_start.
        FileNotFoundError: no such file.
    """
    if on_bad_answer not in ON_BAD_ANSWER:
        raise UserError(f"on_bad_answer must be one of {ON_BAD_ANSWER}, got {on_bad_answer!r}")
    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"SQuAD file {path!r} does not exist")
    try:
        payload = json.loads(textfiles.read_text(path, encoding))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg} at line {e.lineno} column "
                        f"{e.colno})") from None
    offsets = True
    if isinstance(payload, list) and payload and isinstance(payload[0], dict) \
            and "context_text" in payload[0]:
        payload, offsets = _from_cmrc2018_layout(payload, path), False
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise UserError(f"{path}: expected a SQuAD JSON object with a 'data' list at the top "
                        "(or CMRC 2018's list of {context_id, context_text, qas})")

    examples: list[QAExample] = []
    problems: dict[str, list[str]] = collections.defaultdict(list)
    seen_ids: set[str] = set()
    for a, article in enumerate(payload["data"]):
        paragraphs = article.get("paragraphs", []) if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise UserError(f"{path}: data[{a}] must be an object with a 'paragraphs' list, got "
                            f"{str(article)[:200]}")
        for p, paragraph in enumerate(paragraphs):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or "context" not in paragraph \
                    or "qas" not in paragraph:
                raise UserError(f"{where} needs 'context' and 'qas'")
            context = paragraph["context"]
            if not isinstance(context, str) or not isinstance(paragraph["qas"], list):
                raise UserError(f"{where}: 'context' must be a string and 'qas' a list, got "
                                f"{type(context).__name__} and "
                                f"{type(paragraph['qas']).__name__}")
            for qa in paragraph["qas"]:
                example = _read_question(qa, context, article.get("title", ""), where,
                                         on_bad_answer, problems, offsets)
                if example.qas_id in seen_ids:
                    raise UserError(f"{where}: question id {example.qas_id!r} appears twice")
                seen_ids.add(example.qas_id)
                examples.append(example)
    if not examples:
        raise UserError(f"{path}: no questions (no paragraph in its 'data' list has 'qas')")
    for kind, ids in problems.items():
        shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
        logger.warning("%s: %d question(s) with %s (%s): %s", path, len(ids), kind,
                       PROBLEM_KINDS[kind], shown)
    return SquadData(examples, str(payload.get("version", "")), dict(problems))


def _from_cmrc2018_layout(payload: list, path: str) -> dict[str, Any]:
    """CMRC 2018's first layout as SQuAD JSON (answers without answer_start)."""
    data = []
    for i, item in enumerate(payload):
        if not isinstance(item, dict) or "context_text" not in item or "qas" not in item:
            raise UserError(f"{path}: item [{i}] needs 'context_text' and 'qas' (CMRC 2018 "
                            f"layout), got {str(item)[:200]}")
        qas = []
        for qa in item["qas"]:
            for key in ("query_id", "query_text"):
                if key not in qa:
                    raise UserError(f"{path}: [{i}] ({item.get('context_id', '?')}): a question "
                                    f"has no {key!r} field: {str(qa)[:200]}")
            answers = qa.get("answers", [])
            if not all(isinstance(a, str) for a in answers):
                raise UserError(f"{path}: [{i}] question {qa['query_id']!r}: CMRC 2018 layout "
                                f"answers are texts, got {str(answers)[:200]}")
            qas.append({"id": qa["query_id"], "question": qa["query_text"],
                        "answers": [{"text": a} for a in answers]})
        data.append({"title": item.get("title", ""),
                     "paragraphs": [{"context": item["context_text"], "qas": qas}]})
    return {"version": "cmrc2018", "data": data}


def _read_question(qa: dict, context: str, title: str, where: str, on_bad_answer: str,
                   problems: dict[str, list[str]], offsets: bool = True) -> QAExample:
    for key in ("id", "question"):
        if not isinstance(qa, dict) or key not in qa:
            raise UserError(f"{where}: a question has no {key!r} field: {str(qa)[:200]}")
    qas_id = str(qa["id"]).strip()
    if not isinstance(qa["question"], str):
        raise UserError(f"{where}: question {qas_id!r}: 'question' must be a string, got "
                        f"{json.dumps(qa['question'], ensure_ascii=False)[:200]}")
    is_impossible = bool(qa.get("is_impossible", False))
    answers = [] if is_impossible else [dict(x) for x in qa.get("answers", [])]
    trainable = True
    for i, answer in enumerate(answers):
        if not offsets and "text" in answer:  # CMRC 2018's first layout: texts only
            found = _locate_answer(context, answer["text"], 0)
            answer["answer_start"] = -1 if found is None else found
            kind = "located_answer" if found is not None else "unmatched_answer"
            if found is None and on_bad_answer == "error":
                raise UserError(f"{where}: question {qas_id!r} answer {i}: text "
                                f"{answer['text']!r} does not occur in the context "
                                "(on_bad_answer='warn' scores it by text, not trained on)")
            trainable = trainable and (found is not None or i > 0)
            if qas_id not in problems[kind]:
                problems[kind].append(qas_id)
            continue
        if "text" not in answer or "answer_start" not in answer:
            raise UserError(f"{where}: question {qas_id!r} answer {i} needs 'text' and "
                             f"'answer_start', got {answer}")
        text, start = answer["text"], int(answer["answer_start"])
        answer["answer_start"] = start
        if context[start:start + len(text)] == text and text:
            continue
        found = _locate_answer(context, text, start)
        message = (f"{where}: question {qas_id!r} answer {i}: text {text!r} is not at "
                   f"answer_start {start} (the context there reads "
                   f"{context[start:start + len(text)]!r})")
        if on_bad_answer == "error":
            hint = (f"; it occurs at {found}" if found is not None
                    else "; the text does not occur in the context")
            raise UserError(message + hint + " (on_bad_answer='warn' repairs or skips it)")
        if found is not None:
            answer["answer_start"] = found
            kind = "repaired_answer"
        else:
            kind = "unmatched_answer"
            if i == 0:  # only the first answer is a training target
                trainable = False
        logger.debug("%s: %s", kind, message)  # each one (run_squad.py --verbose_logging)
        if qas_id not in problems[kind]:
            problems[kind].append(qas_id)
    if not is_impossible and not answers:
        logger.debug("missing_answers: %s: question %r", where, qas_id)
        problems["missing_answers"].append(qas_id)
    if not qa["question"].strip():
        problems["empty_question"].append(qas_id)
        trainable = False
    return QAExample(qas_id, qa["question"], context, answers, is_impossible, trainable, title)


def write_squad_json(examples: Sequence[QAExample], path: str, version: str = "v2.0") -> str:
    """Writes examples as SQuAD JSON: one article per title, questions on the same context in one
    paragraph. Returns the path."""
    articles: dict[str, dict[str, list[dict]]] = {}
    for ex in examples:
        qa: dict[str, Any] = {"id": ex.qas_id, "question": ex.question, "answers": ex.answers}
        if ex.is_impossible or version.startswith("v2"):
            qa["is_impossible"] = ex.is_impossible
        articles.setdefault(ex.title, {}).setdefault(ex.context, []).append(qa)
    payload = {"version": version, "data": [
        {"title": title, "paragraphs": [{"context": c, "qas": qas} for c, qas in paras.items()]}
        for title, paras in articles.items()]}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, ensure_ascii=False, indent=1)
    return path


def gold_answers(examples: Iterable[QAExample]) -> dict[str, list[str]]:
    """qas_id -> gold answer texts ([] for unanswerable), for the examples that can be scored."""
    return {ex.qas_id: [a["text"] for a in ex.answers] for ex in examples if ex.has_gold}


# tfbert/tasks/qa.py and the tests reach the built-in QA set and the feature windowing as
# attributes of this module (`qa_data.make_dataset(...)`); those modules import this one, so the
# names load on first use.
_ELSEWHERE = {
    **dict.fromkeys(("BUILTIN_SPLITS", "builtin_qa_examples", "write_builtin_qa"),
                    "tfbert.data.qa_builtin"),
    **dict.fromkeys(("WH_WORDS", "cloze_question", "paragraph_entities"),
                    "tfbert.data.qa_cloze"),
    **dict.fromkeys(("QAFeature", "TokenizedExample", "char_span_to_tokens", "convert_examples",
                     "make_dataset", "make_features", "stack_features", "tokenize_examples"),
                    "tfbert.data.qa_features"),
    **dict.fromkeys(("is_max_context", "window_spans"), "tfbert.data.windows"),
}


def __getattr__(name: str) -> Any:
    if name not in _ELSEWHERE:
        raise AttributeError(f"module 'tfbert.data.squad' has no attribute {name!r}")
    return getattr(importlib.import_module(_ELSEWHERE[name]), name)
