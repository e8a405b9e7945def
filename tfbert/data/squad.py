"""Extractive QA data: SQuAD v1.1 / v2.0 JSON (CMRC2018 uses the same format), windowed features,
and the built-in Chinese QA set generated from People's Daily.

Reading. `read_squad_json(path)` returns a `SquadData` (examples + the problems it found). Every
answer is checked against its context (`context[answer_start:answer_start + len(text)] == text`).
A mismatch is either an error naming the file and question id (`on_bad_answer="error"`) or a counted
warning (`"warn"`, the default): the answer is moved to the occurrence of its text nearest to the
given `answer_start` ("repaired_answer"), or, when the text is not in the context at all, the
question is kept for scoring by text but not trained on ("unmatched_answer"). Nothing is dropped
silently; `SquadData.problems` lists the ids by kind.

Features (B = batch, T = max_seq_length). The question is segment A (its first `max_query_length`
word pieces), a window of the context's word pieces is segment B:
`[CLS] question [SEP] window [SEP] [PAD]...`. Windows start every `doc_stride` word pieces (the
stride is the step between window starts, as in Google's run_squad.py) until the last one reaches
the end of the context. Each feature keeps, per position, the character span of its token in the
original context (`token_start_char`/`token_end_char`, -1 outside the window) and whether this
window is the one that gives the token the most context on both sides (`token_is_max_context`),
which is what postprocessing needs to turn logits back into text. Training labels are the
positions of the first and last answer token in the packed sequence, or 0 ([CLS]) when the
answer is not inside the window or the question has no answer.

Built-in QA (`builtin_qa_examples`): cloze questions about the named entities of People's Daily
(`nr` person, `ns` place, `nt` organisation). The context is the paragraph (one line of the file),
the question is the clause around one entity with the entity replaced by 谁 / 哪里 / 哪个机构, and
the answer is the entity with its character offset. One question per paragraph of 20-400
characters, deterministic, split by a stable hash of the paragraph (`corpora.stable_split`):
8,401 train, 1,098 dev and 1,077 test questions. `write_builtin_qa` writes it as SQuAD JSON, so
runs read it through the same reader as any other file.

    data = read_squad_json("dev-v1.1.json")
    features, stats = convert_examples(data.examples, tfbert.BertTokenizer("vocab.txt"),
                                       max_seq_length=384, doc_stride=128, max_query_length=64)
    ds = make_dataset(features, batch_size=32, training=True)   # (inputs, start/end labels)
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tfbert import textfiles
from tfbert.data import corpora
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

BUILTIN_SPLITS = ("train", "dev", "test")
ON_BAD_ANSWER = ("error", "warn")
# Problems a reader reports (kind -> meaning).
PROBLEM_KINDS = {
    "repaired_answer": "answer_start did not point at the answer text; moved to the nearest "
                       "occurrence of the text in the context",
    "unmatched_answer": "answer text is not in the context; scored by text, not trained on",
    "missing_answers": "no answers and not marked is_impossible; predicted but not scored",
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
        trainable: bool. False when the first answer could not be located in the context.
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
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise UserError(f"{path}: expected a SQuAD JSON object with a 'data' list at the top")

    examples: list[QAExample] = []
    problems: dict[str, list[str]] = collections.defaultdict(list)
    seen_ids: set[str] = set()
    for a, article in enumerate(payload["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            if "context" not in paragraph or "qas" not in paragraph:
                raise UserError(f"{where} needs 'context' and 'qas'")
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                example = _read_question(qa, context, article.get("title", ""), where,
                                         on_bad_answer, problems)
                if example.qas_id in seen_ids:
                    raise UserError(f"{where}: question id {example.qas_id!r} appears twice")
                seen_ids.add(example.qas_id)
                examples.append(example)
    for kind, ids in problems.items():
        shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
        logger.warning("%s: %d question(s) with %s (%s): %s", path, len(ids), kind,
                       PROBLEM_KINDS[kind], shown)
    return SquadData(examples, str(payload.get("version", "")), dict(problems))


def _read_question(qa: dict, context: str, title: str, where: str, on_bad_answer: str,
                   problems: dict[str, list[str]]) -> QAExample:
    for key in ("id", "question"):
        if key not in qa:
            raise UserError(f"{where}: a question has no {key!r} field: {str(qa)[:200]}")
    qas_id = str(qa["id"]).strip()
    is_impossible = bool(qa.get("is_impossible", False))
    answers = [] if is_impossible else [dict(x) for x in qa.get("answers", [])]
    trainable = True
    for i, answer in enumerate(answers):
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
        if qas_id not in problems[kind]:
            problems[kind].append(qas_id)
    if not is_impossible and not answers:
        problems["missing_answers"].append(qas_id)
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


# --- the built-in QA set -----------------------------------------------------------------------

_ENTITY_TAGS = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
WH_WORDS = {"PER": "谁", "LOC": "哪里", "ORG": "哪个机构"}
_CLAUSE_BREAKS = set("，,；;：:。！？!?")
_SENTENCE_BREAKS = set("。！？!?")
_TRIM = "，,；;：:。！？!?、“”‘’\"'（）()《》「」『』—… \u3000"
_MIN_QUESTION_CHARS = 6  # clause characters besides the entity
_MAX_SIDE_CHARS = 24  # question characters kept on each side of the entity
_MIN_PARAGRAPH, _MAX_PARAGRAPH = 20, 400  # characters


def paragraph_entities(pairs: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[int, int, str]]]:
    """Plain text of a tagged paragraph and its entities as (start, end, type) character spans.

    A short `nr` word followed directly by another `nr` word (surname, given name: 江/nr 泽民/nr)
    is one person; a run like 江/nr 泽民/nr 李/nr 鹏/nr is two. A bracketed compound such as
    `[中央/n 人民/n 广播/vn 电台/n]nt` (first word starting with "[", last tag "n]nt") is one entity
    of its outer tag, and the entities inside it are not counted separately.
    """
    text: list[str] = []
    pos = 0
    entities: list[tuple[int, int, str]] = []
    compound_start: int | None = None
    compound_entities: list[tuple[int, int, str]] = []
    surname_end: int | None = None  # end of a lone `nr` word that a given name may follow
    for word, tag in pairs:
        if word.startswith("[") and len(word) > 1:
            compound_start, compound_entities, surname_end = pos, [], None
            word = word[1:]
        inner, _, outer = tag.partition("]")
        start, pos = pos, pos + len(word)
        text.append(word)
        target = compound_entities if compound_start is not None else entities
        kind = _ENTITY_TAGS.get(inner)
        if kind == "PER" and surname_end == start:
            target[-1] = (target[-1][0], pos, "PER")  # surname + given name
            surname_end = None
        elif kind:
            target.append((start, pos, kind))
            # A one- or two-character `nr` word may be a surname that the next `nr` completes.
            surname_end = pos if kind == "PER" and len(word) <= 2 else None
        else:
            surname_end = None
        if outer and compound_start is not None:
            if outer in _ENTITY_TAGS:
                entities.append((compound_start, pos, _ENTITY_TAGS[outer]))
            else:
                entities.extend(compound_entities)
            compound_start, surname_end = None, None
    if compound_start is not None:  # an unclosed bracket: keep what was inside
        entities.extend(compound_entities)
    return "".join(text), entities


def cloze_question(paragraph: str, start: int, end: int, kind: str) -> str:
    """The clause around paragraph[start:end] with the entity replaced by its question word.

    The clause runs between clause punctuation (，；：。！？), widened to neighbouring clauses of
    the same sentence while it has fewer than 6 characters besides the entity, and cut to 24
    characters on each side of the entity.
    """
    n = len(paragraph)

    def left_break(i: int) -> int:  # start of the clause holding position i - 1
        while i > 0 and paragraph[i - 1] not in _CLAUSE_BREAKS:
            i -= 1
        return i

    def right_break(i: int) -> int:  # index of the clause break at or after i
        while i < n and paragraph[i] not in _CLAUSE_BREAKS:
            i += 1
        return i

    left, right = left_break(start), right_break(end)
    while (right - left) - (end - start) < _MIN_QUESTION_CHARS:
        if right < n and paragraph[right] not in _SENTENCE_BREAKS:
            right = right_break(right + 1)
        elif left > 0 and paragraph[left - 1] not in _SENTENCE_BREAKS:
            left = left_break(left - 1)
        else:
            break
    left, right = max(left, start - _MAX_SIDE_CHARS), min(right, end + _MAX_SIDE_CHARS)
    before = paragraph[left:start].lstrip(_TRIM)
    after = paragraph[end:right].rstrip(_TRIM)
    return before + WH_WORDS[kind] + after + "？"


def _hash_int(text: str) -> int:
    return int.from_bytes(hashlib.md5(text.encode("utf-8")).digest()[:8], "big")


@functools.lru_cache(maxsize=1)
def _builtin_questions() -> tuple[tuple[str, str, str, str, int], ...]:
    """(id, question, paragraph, answer, answer_start): one cloze question per eligible People's
    Daily paragraph (20-400 characters, first occurrence), in file order, all splits."""
    out = []
    seen: set[str] = set()
    for line, pairs in enumerate(corpora.people_daily_tagged()):
        paragraph, entities = paragraph_entities(pairs)
        if not (_MIN_PARAGRAPH <= len(paragraph) <= _MAX_PARAGRAPH) or paragraph in seen:
            continue
        seen.add(paragraph)
        questions = []
        for start, end, kind in entities:
            if end - start < 2:
                continue
            question = cloze_question(paragraph, start, end, kind)
            if len(question) - len(WH_WORDS[kind]) - 1 >= 4:
                questions.append((start, end, question))
        if questions:
            start, end, question = questions[_hash_int(paragraph) % len(questions)]
            out.append((f"pd{line:05d}", question, paragraph, paragraph[start:end], start))
    return tuple(out)


def builtin_qa_examples(split: str, version_2_with_negative: bool = False) -> list[QAExample]:
    """The built-in Chinese QA examples of one split ("train", "dev" or "test").

    Args:
        split: str. Which split (by `corpora.stable_split` of the paragraph).
        version_2_with_negative: bool. Make about a third of the questions unanswerable (SQuAD
            v2.0 style): their context is swapped for another paragraph of the same split that
            does not contain the answer, and they are marked `is_impossible`.

    Returns:
        list of QAExample, deterministic across runs and machines.
    """
    if split not in BUILTIN_SPLITS:
        raise ValueError(f"split must be one of {BUILTIN_SPLITS}, got {split!r}")
    examples = [QAExample(qas_id, question, context, [{"text": text, "answer_start": start}],
                          title="people_daily_199801")
                for qas_id, question, context, text, start in _builtin_questions()
                if corpora.stable_split(context) == split]
    if not version_2_with_negative:
        return examples
    out = []
    for i, ex in enumerate(examples):
        if _hash_int("negative:" + ex.qas_id) % 3 != 0:
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


# --- features ----------------------------------------------------------------------------------


@dataclasses.dataclass
class TokenizedExample:
    """Word-piece ids of a question and a context, with each context piece's [start, end)
    character span in the original context."""

    query_ids: list[int]
    doc_ids: list[int]
    doc_starts: list[int]
    doc_ends: list[int]


@dataclasses.dataclass
class QAFeature:
    """One window of one example, packed to max_seq_length (T).

    Args:
        example_index: int. Index of the example in the list the features were made from.
        window_index: int. Which window of that example (0 = the first).
        input_ids, input_mask, segment_ids: int32 array [T]. The model inputs.
        token_start_char, token_end_char: int32 array [T]. Character span in the context of the
            token at each position; -1 for [CLS], question, [SEP] and padding positions.
        token_is_max_context: bool array [T]. Whether this window gives the token at the position
            its most balanced context (only such positions may start an answer).
        start_position, end_position: int. Training labels (0 = [CLS]: no answer in the window).
    """

    example_index: int
    window_index: int
    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    token_start_char: np.ndarray
    token_end_char: np.ndarray
    token_is_max_context: np.ndarray
    start_position: int = 0
    end_position: int = 0


def tokenize_examples(examples: Sequence[QAExample], tokenizer: Any,
                      batch_size: int = 256) -> list[TokenizedExample]:
    """Runs a `tfbert.BertTokenizer` over questions and contexts (contexts with offsets).

    Args:
        examples: sequence of QAExample.
        tokenizer: tfbert.BertTokenizer. `tokenize(texts)` and `tokenize_with_offsets(texts)`
            give word-piece ids and character offsets into the original strings.
        batch_size: int. Strings per tokenizer call.
    """
    import tensorflow as tf
    from tqdm import tqdm

    out: list[TokenizedExample] = []
    for i in tqdm(range(0, len(examples), batch_size), desc="tokenizing questions and contexts",
                  unit="batch", disable=None, leave=False):
        batch = examples[i:i + batch_size]
        queries = tokenizer.tokenize(tf.constant([ex.question for ex in batch])).to_list()
        ids, starts, ends = tokenizer.tokenize_with_offsets(
            tf.constant([ex.context for ex in batch]))
        for q, d, s, e in zip(queries, ids.to_list(), starts.to_list(), ends.to_list(),
                              strict=True):
            out.append(TokenizedExample([int(x) for x in q], [int(x) for x in d],
                                        [int(x) for x in s], [int(x) for x in e]))
    return out


def char_span_to_tokens(starts: Sequence[int], ends: Sequence[int], char_start: int,
                        char_end: int) -> tuple[int, int] | None:
    """First and last token (inclusive) overlapping characters [char_start, char_end), or None
    when no token does (the span is only whitespace or dropped characters)."""
    first = bisect.bisect_right(list(ends), char_start)  # first token ending after char_start
    last = bisect.bisect_left(list(starts), char_end) - 1  # last token starting before char_end
    if first >= len(starts) or last < first:
        return None
    return first, last


def window_spans(num_tokens: int, max_tokens: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of the context windows: a window every `doc_stride` tokens until one
    reaches the end (Google's run_squad.py rule). An empty context gets one empty window."""
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, doc_stride)


def is_max_context(spans: Sequence[tuple[int, int]], span_index: int, position: int) -> bool:
    """Whether window `span_index` is the one where token `position` has the most context
    (min of left and right context, ties to the longer window then the earlier one)."""
    best_score, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, i
    return best_index == span_index


def make_features(examples: Sequence[QAExample], tokenized: Sequence[TokenizedExample],
                  max_seq_length: int, doc_stride: int, max_query_length: int,
                  cls_id: int, sep_id: int, pad_id: int) -> tuple[list[QAFeature], dict[str, int]]:
    """Windows each tokenized example into packed features.

    Args:
        examples: sequence of QAExample.
        tokenized: the same examples through `tokenize_examples`.
        max_seq_length: int. T, the packed length.
        doc_stride: int. Word pieces between the starts of consecutive windows.
        max_query_length: int. Question word pieces kept (the rest is cut off).
        cls_id, sep_id, pad_id: int. Special token ids.

    Returns:
        (features, stats): stats counts examples, features, truncated questions, answers that
        fall outside a window, and answers that cover no token.
    """
    if len(examples) != len(tokenized):
        raise ValueError(f"{len(examples)} examples but {len(tokenized)} tokenized examples")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be at least 1, got {doc_stride}")
    if max_seq_length < max_query_length + 4:
        raise ValueError(f"max_seq_length {max_seq_length} leaves no room for the context after "
                         f"max_query_length {max_query_length} + 3 special tokens")
    stats = collections.Counter(examples=len(examples))
    features: list[QAFeature] = []
    no_tokens: list[str] = []  # questions whose answer covers no word piece
    for example_index, (ex, tok) in enumerate(zip(examples, tokenized, strict=True)):
        query = tok.query_ids[:max_query_length]
        stats["truncated_questions"] += len(tok.query_ids) > max_query_length
        answer_tokens = None
        char_span = ex.answer_char_span
        if char_span is not None:
            answer_tokens = char_span_to_tokens(tok.doc_starts, tok.doc_ends, *char_span)
            if answer_tokens is None:
                no_tokens.append(ex.qas_id)
        offset = len(query) + 2  # [CLS] question [SEP]
        spans = window_spans(len(tok.doc_ids), max_seq_length - offset - 1, doc_stride)
        for window_index, (start, length) in enumerate(spans):
            ids = [cls_id] + query + [sep_id] + tok.doc_ids[start:start + length] + [sep_id]
            n = len(ids)
            input_ids = np.full(max_seq_length, pad_id, np.int32)
            input_ids[:n] = ids
            input_mask = (np.arange(max_seq_length) < n).astype(np.int32)
            segment_ids = np.zeros(max_seq_length, np.int32)
            segment_ids[offset:n] = 1
            start_char = np.full(max_seq_length, -1, np.int32)
            end_char = np.full(max_seq_length, -1, np.int32)
            start_char[offset:offset + length] = tok.doc_starts[start:start + length]
            end_char[offset:offset + length] = tok.doc_ends[start:start + length]
            max_context = np.zeros(max_seq_length, bool)
            for j in range(length):
                max_context[offset + j] = is_max_context(spans, window_index, start + j)
            start_position = end_position = 0
            if answer_tokens is not None:
                first, last = answer_tokens
                if start <= first and last < start + length:
                    start_position, end_position = first - start + offset, last - start + offset
                else:
                    stats["answer_outside_window"] += 1
            features.append(QAFeature(example_index, window_index, input_ids, input_mask,
                                      segment_ids, start_char, end_char, max_context,
                                      start_position, end_position))
    stats["features"] = len(features)
    if no_tokens:
        stats["answers_without_tokens"] = len(no_tokens)
        logger.warning("%d answer(s) cover no word piece of their context (only whitespace or "
                       "dropped characters; trained as no answer): %s", len(no_tokens),
                       ", ".join(no_tokens[:10]) + (", ..." if len(no_tokens) > 10 else ""))
    return features, dict(stats)


def convert_examples(examples: Sequence[QAExample], tokenizer: Any, max_seq_length: int,
                     doc_stride: int, max_query_length: int
                     ) -> tuple[list[QAFeature], dict[str, int]]:
    """`tokenize_examples` then `make_features` with the tokenizer's special ids."""
    tokenized = tokenize_examples(examples, tokenizer)
    return make_features(examples, tokenized, max_seq_length, doc_stride, max_query_length,
                         tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)


def stack_features(features: Sequence[QAFeature]) -> dict[str, np.ndarray]:
    """Model inputs as arrays [N, T] int32 plus `start_positions`/`end_positions` [N]."""
    if not features:
        raise ValueError("no features to stack (empty example list?)")
    return {
        "input_ids": np.stack([f.input_ids for f in features]),
        "input_mask": np.stack([f.input_mask for f in features]),
        "segment_ids": np.stack([f.segment_ids for f in features]),
        "start_positions": np.array([f.start_position for f in features], np.int32),
        "end_positions": np.array([f.end_position for f in features], np.int32),
    }


def make_dataset(features: Sequence[QAFeature], batch_size: int, training: bool = False,
                 seed: int | None = None, with_labels: bool = True) -> Any:
    """A tf.data.Dataset of (inputs, labels) batches, or of inputs alone.

    Args:
        features: sequence of QAFeature.
        batch_size: int. Batch size (the last batch may be smaller).
        training: bool. Shuffle (every epoch, with `seed`) and repeat nothing.
        seed: int or None. Shuffle seed.
        with_labels: bool. Yield `(inputs, {"start_logits": start [B], "end_logits": end [B]})`
            so the label keys match `BertSpanLabeler`'s outputs; False yields inputs only.
    """
    import tensorflow as tf

    arrays = stack_features(features)
    inputs = {k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")}
    if with_labels:
        labels = {"start_logits": arrays["start_positions"], "end_logits": arrays["end_positions"]}
        ds = tf.data.Dataset.from_tensor_slices((inputs, labels))
    else:
        ds = tf.data.Dataset.from_tensor_slices(inputs)
    if training:
        ds = ds.shuffle(len(features), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
