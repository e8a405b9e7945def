"""Extractive QA's span decoding (logits -> answer text) and prediction files.

Span decoding follows Google's run_squad.py `write_predictions`: in every window of an example,
take the `n_best_size` best start and end positions, keep the pairs that lie in the context, whose
start token has its maximal context in this window, with end >= start and at most
`max_answer_length` tokens; score = start logit + end logit, best over all windows. The answer text
is the slice of the ORIGINAL context from the first character of the start token to the last
character of the end token (the tokenizer's offsets), so casing, accents and spacing come back as
written. SQuAD v2.0: the null score is the smallest [CLS] start + end logit over the windows; the
question is answered "" when null score - best span score > `null_score_diff_threshold` (that
difference is written to null_odds.json).

The three prediction files are those of Google's `write_predictions`, key for key and in its
order (tests/test_google_squad.py checks them against its own output): the n-best list holds
distinct texts with a softmax over their scores, v2.0 adds "" (the null answer) when the list
lacks it, and a v1.1 question with no valid span gets Google's stand-in entry "empty" (logits 0).
Where the two differ: (1) the answer text is cut from the original context by character offsets,
where Google joins the question's whitespace-split words with single spaces and maps the
normalized piece text back onto them (`get_final_text`), so a context with runs of spaces, tabs or
newlines inside an answer gives the text as written here and with single spaces there, and where
that mapping fails Google returns the whole words; (2) the files are UTF-8 (`ensure_ascii=False`,
Google escapes non-ASCII as \\uXXXX; the same JSON values); (3) a v2.0 question without any valid
span (e.g. an empty context) is answered "" with null odds 1e6, where Google's code fails.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfbert.data.qa_features import QAFeature
from tfbert.data.squad import QAExample
from tfbert.evaluation.spans import span_candidates
from tfbert.fileio import atomic_write, json_text


@dataclasses.dataclass
class SpanPrediction:
    """One candidate answer: text, character span in the context, logits, softmax probability."""

    text: str
    start_char: int
    end_char: int
    start_logit: float
    end_logit: float
    probability: float = 0.0

    @property
    def score(self) -> float:
        return self.start_logit + self.end_logit


def _softmax(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exp = [math.exp(s - top) for s in scores]
    total = sum(exp)
    return [e / total for e in exp]


def decode_example(example: QAExample, features: Sequence[QAFeature],
                   start_logits: Sequence[np.ndarray], end_logits: Sequence[np.ndarray],
                   n_best_size: int = 20, max_answer_length: int = 30,
                   version_2_with_negative: bool = False
                   ) -> tuple[list[SpanPrediction], float | None]:
    """The n-best answers of one example over all its windows.

    Args:
        example: QAExample. Gives the context the answer text is cut from.
        features: its windows (QAFeature), in any order.
        start_logits, end_logits: one float array [T] per feature.
        n_best_size: int. Candidates per window and side, and answers returned.
        max_answer_length: int. Longest answer, in word pieces.
        version_2_with_negative: bool. Add the "" (no answer) candidate with the null score.

    Returns:
        (nbest, null_score): candidates best first with softmax probabilities (distinct texts;
        "" is the no-answer candidate), and the smallest [CLS] score over the windows (v2.0) or
        None.
    """
    candidates: list[SpanPrediction] = []
    null_score: float | None = None
    null_logits = (0.0, 0.0)
    features = list(features)
    all_starts, all_ends = (np.asarray(x, np.float64) for x in (start_logits, end_logits))
    if len(all_starts) != len(features) or len(all_ends) != len(features):
        raise ValueError(f"{len(features)} windows but {len(all_starts)} start and "
                         f"{len(all_ends)} end logit rows")
    if features:  # [W, K] best positions per window, [W, K, K] candidate pairs
        top_starts, top_ends, ok = (x.numpy() for x in span_candidates(
            all_starts, all_ends,
            [(np.asarray(f.token_start_char) >= 0) & np.asarray(f.token_is_max_context, bool)
             for f in features],
            [np.asarray(f.token_end_char) >= 0 for f in features],
            n_best_size, max_answer_length))
    for w, (feature, starts, ends) in enumerate(zip(features, all_starts, all_ends, strict=True)):
        if version_2_with_negative:
            score = float(starts[0] + ends[0])
            if null_score is None or score < null_score:
                null_score, null_logits = score, (float(starts[0]), float(ends[0]))
        for i, j in zip(*np.nonzero(ok[w]), strict=True):  # run_squad's candidate order
            s, e = top_starts[w, i], top_ends[w, j]
            start_char = int(feature.token_start_char[s])
            end_char = int(feature.token_end_char[e])
            candidates.append(SpanPrediction(example.context[start_char:end_char],
                                             start_char, end_char, float(starts[s]),
                                             float(ends[e])))
    if version_2_with_negative and null_score is not None:
        candidates.append(SpanPrediction("", -1, -1, *null_logits))
    candidates.sort(key=lambda c: c.score, reverse=True)
    nbest: list[SpanPrediction] = []
    seen: set[str] = set()
    for c in candidates:
        if c.text in seen:
            continue
        seen.add(c.text)
        nbest.append(c)
        if len(nbest) >= n_best_size:
            break
    if version_2_with_negative and "" not in seen and null_score is not None:
        nbest.append(SpanPrediction("", -1, -1, *null_logits))
    for c, p in zip(nbest, _softmax([c.score for c in nbest]), strict=True):
        c.probability = p
    return nbest, null_score


# Google's write_predictions: the n-best entry keys, in its order, and a v1.1 question's answer
# when no span is valid.
NBEST_KEYS = ("text", "probability", "start_logit", "end_logit")
NO_SPAN_TEXT = "empty"


def postprocess_predictions(examples: Sequence[QAExample], features: Sequence[QAFeature],
                            start_logits: np.ndarray, end_logits: np.ndarray,
                            n_best_size: int = 20, max_answer_length: int = 30,
                            version_2_with_negative: bool = False,
                            null_score_diff_threshold: float = 0.0
                            ) -> tuple[dict[str, str], dict[str, list[dict[str, Any]]],
                                       dict[str, float]]:
    """Turns the model's logits for every feature into one answer per question.

    Args:
        examples: sequence of QAExample (what `features` were made from).
        features: sequence of QAFeature, N windows.
        start_logits, end_logits: float arrays [N, T], row i for features[i].
        n_best_size: int. Candidates kept per window and in the n-best list.
        max_answer_length: int. Longest answer, in word pieces.
        version_2_with_negative: bool. Allow "no answer" (SQuAD v2.0).
        null_score_diff_threshold: float. v2.0: answer "" when the null score beats the best
            span score by more than this.

    Returns:
        (predictions, nbest, null_odds): question id -> answer text; question id -> n-best list
        of dicts (text, probability, start_logit, end_logit, start_char, end_char); question id ->
        null score - best span score (v2.0 only, else empty). A v1.1 question without any valid
        span gets Google's stand-in entry: text "empty", logits 0, character span -1.
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    if len(features) != len(start_logits) or len(features) != len(end_logits):
        raise ValueError(f"{len(features)} features but {len(start_logits)} start and "
                         f"{len(end_logits)} end logit rows")
    by_example: dict[int, list[int]] = {}
    for i, feature in enumerate(features):
        by_example.setdefault(feature.example_index, []).append(i)
    predictions: dict[str, str] = {}
    nbest_json: dict[str, list[dict[str, Any]]] = {}
    null_odds: dict[str, float] = {}
    for example_index, example in enumerate(examples):
        rows = by_example.get(example_index, [])
        nbest, null_score = decode_example(
            example, [features[i] for i in rows], start_logits[rows], end_logits[rows],
            n_best_size, max_answer_length, version_2_with_negative)
        if not nbest and not version_2_with_negative:  # Google's stand-in answer
            nbest = [SpanPrediction(NO_SPAN_TEXT, -1, -1, 0.0, 0.0, 1.0)]
        nbest_json[example.qas_id] = [dataclasses.asdict(c) for c in nbest]
        best_span = next((c for c in nbest if c.text), None)
        if not version_2_with_negative:
            predictions[example.qas_id] = nbest[0].text
            continue
        if best_span is None or null_score is None:
            # No valid span in any window (e.g. an empty context): the answer can only be "".
            null_odds[example.qas_id] = 1e6
            predictions[example.qas_id] = ""
            continue
        diff = null_score - best_span.score
        null_odds[example.qas_id] = diff
        predictions[example.qas_id] = "" if diff > null_score_diff_threshold else best_span.text
    return predictions, nbest_json, null_odds


# --- the run -----------------------------------------------------------------------------------


def _write_json(path: str, payload: Any) -> None:
    with atomic_write(path) as f:  # key order kept: predictions follow the questions
        f.write(json_text(payload, ensure_ascii=False, indent=4) + "\n")  # Google's layout


def write_predictions(predictions: dict[str, str], nbest: dict[str, list[dict[str, Any]]],
                      null_odds: dict[str, float] | None, prediction_file: str, nbest_file: str,
                      null_odds_file: str | None = None) -> list[str]:
    """Writes `postprocess_predictions`' outputs in the formats of Google's run_squad.py.

    Args:
        predictions: question id -> answer text ("" for the null answer).
        nbest: question id -> n-best dicts; only Google's keys (`NBEST_KEYS`) are written.
        null_odds: question id -> null score - best span score, or None (v1.1).
        prediction_file, nbest_file: str. predictions.json and nbest_predictions.json paths.
        null_odds_file: str or None. null_odds.json path (written when null_odds is given).

    Returns:
        The paths written.
    """
    _write_json(prediction_file, predictions)
    _write_json(nbest_file, {qid: [{k: entry[k] for k in NBEST_KEYS} for entry in entries]
                             for qid, entries in nbest.items()})
    written = [prediction_file, nbest_file]
    if null_odds is not None and null_odds_file:
        _write_json(null_odds_file, null_odds)
        written.append(null_odds_file)
    return written
