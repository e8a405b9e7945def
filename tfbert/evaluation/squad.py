"""Extractive QA metrics: SQuAD's official exact match / F1, and CMRC2018's for Chinese.

- SQuAD (English): answers are normalised as the official evaluation scripts do (lower case,
  remove ASCII punctuation, remove the articles a/an/the, collapse whitespace); F1 is over
  whitespace tokens (bag overlap). `squad_v1_scores` follows evaluate-v1.1.py (a question with no
  prediction scores 0); `squad_v2_scores` follows evaluate-v2.0.py (unanswerable questions have the
  gold answer "", the HasAns/NoAns breakdown, and the best no-answer threshold when null odds are
  given; questions with no prediction are left out of the totals, as that script does).
  `best_null_threshold` runs that script's best-threshold search on F1 over each question's best
  non-null answer: the `null_score_diff_threshold` run_squad.py tunes on dev and stores with the
  model (`apply_null_threshold` applies it: "" where null odds > threshold).
- CMRC2018 (Chinese): text is lower-cased, CMRC's punctuation list removed, and split into single
  Chinese characters plus word tokens for runs of other characters; F1 comes from the longest
  common substring of the two token lists, EM compares the texts without punctuation
  (cmrc2018_evaluate.py). The official script word-tokenizes non-Chinese runs with
  `nltk.word_tokenize`; here they are split into words and punctuation with a regular expression
  (numbers such as 3.5 or 1,000 stay whole), which agrees with nltk on numbers, Latin words and
  punctuation, but not on English contractions ("don't").

All scores are percentages (0-100), as the official scripts print them.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Callable, Mapping, Sequence

# --- SQuAD ------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation and articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact(gold: str, prediction: str) -> int:
    """1 if the normalised texts are equal, else 0."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def squad_f1(gold: str, prediction: str) -> float:
    """Token-overlap F1 of the normalised texts (two empty texts score 1, one empty scores 0)."""
    gold_tokens = normalize_answer(gold).split()
    pred_tokens = normalize_answer(prediction).split()
    if not gold_tokens or not pred_tokens:
        return float(gold_tokens == pred_tokens)
    common = collections.Counter(gold_tokens) & collections.Counter(pred_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# --- CMRC2018 ---------------------------------------------------------------------------------

# cmrc2018_evaluate.py's list; its "……" entry can never equal one character and so never applies.
_CMRC_PUNCTUATION = {"-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=", "，", "。", "：", "？",
                     "！", "“", "”", "；", "’", "《", "》", "……", "·", "、", "「", "」", "（", "）",
                     "－", "～", "『", "』"}
_CJK = re.compile(r"[\u4e00-\u9fa5]")
_WORDS = re.compile(r"\w+(?:[.,']\w+)*|[^\w\s]", re.UNICODE)


def cmrc_segment(text: str, remove_punctuation: bool = True) -> list[str]:
    """CMRC2018's mixed segmentation: each Chinese character a token, other runs split into
    words and punctuation; lower-cased, CMRC punctuation removed when asked."""
    tokens: list[str] = []
    run = ""
    for ch in text.lower().strip():
        if remove_punctuation and ch in _CMRC_PUNCTUATION:
            continue
        if _CJK.match(ch) or ch in _CMRC_PUNCTUATION:
            tokens.extend(_WORDS.findall(run))
            run = ""
            tokens.append(ch)
        else:
            run += ch
    tokens.extend(_WORDS.findall(run))
    return tokens


def _longest_common_substring(a: Sequence[str], b: Sequence[str]) -> int:
    best = 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def cmrc_exact(gold: str, prediction: str) -> int:
    """1 if the texts are equal after lower-casing and removing CMRC's punctuation."""

    def strip(text: str) -> str:
        return "".join(ch for ch in text.lower().strip() if ch not in _CMRC_PUNCTUATION)

    return int(strip(gold) == strip(prediction))


def cmrc_f1(gold: str, prediction: str) -> float:
    """CMRC2018 F1: longest common substring of the segmented texts over their lengths.
    Two empty answers (an unanswerable question answered with "") score 1."""
    gold_tokens, pred_tokens = cmrc_segment(gold), cmrc_segment(prediction)
    if not gold_tokens or not pred_tokens:
        return float(gold_tokens == pred_tokens)
    common = _longest_common_substring(gold_tokens, pred_tokens)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# --- scoring a prediction file ----------------------------------------------------------------

SCORERS: dict[str, tuple[Callable[[str, str], float], Callable[[str, str], float]]] = {
    "squad": (squad_exact, squad_f1),
    "cmrc2018": (cmrc_exact, cmrc_f1),
}


def detect_scoring(gold: Mapping[str, Sequence[str]]) -> str:
    """"cmrc2018" when most gold answers contain Chinese characters, else "squad"."""
    answers = [a for answers in gold.values() for a in answers if a]
    chinese = sum(1 for a in answers if _CJK.search(a))
    return "cmrc2018" if answers and chinese * 2 >= len(answers) else "squad"


def _max_over_gold(fn: Callable[[str, str], float], gold: Sequence[str], prediction: str) -> float:
    return max(fn(g, prediction) for g in gold)


def squad_v1_scores(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                    scoring: str = "squad") -> dict[str, float]:
    """Exact match and F1 over every question, as evaluate-v1.1.py / cmrc2018_evaluate.py.

    Args:
        gold: dict. Question id -> gold answer texts (at least one each).
        predictions: dict. Question id -> predicted text; a missing id scores 0.
        scoring: str. "squad" or "cmrc2018" (character-level, for Chinese).

    Returns:
        dict with `exact_match`, `f1` (percent), `total`, `missing`.
    """
    exact_fn, f1_fn = SCORERS[scoring]
    exact = f1 = 0.0
    missing = 0
    for qid, answers in gold.items():
        if not answers:
            raise ValueError(f"question {qid!r} has no gold answer; SQuAD v1.1 scoring needs one "
                             f"(unanswerable questions need version_2_with_negative)")
        if qid not in predictions:
            missing += 1
            continue
        exact += _max_over_gold(exact_fn, answers, predictions[qid])
        f1 += _max_over_gold(f1_fn, answers, predictions[qid])
    total = len(gold)
    return {"exact_match": 100.0 * exact / max(total, 1), "f1": 100.0 * f1 / max(total, 1),
            "total": total, "missing": missing}


def _best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                    null_odds: Mapping[str, float], has_answer: Mapping[str, bool]
                    ) -> tuple[float, float]:
    """evaluate-v2.0.py's find_best_thresh: the null-odds threshold that maximises the score when
    every question with odds above it is answered with "".

    The walk is the official one (questions by rising null odds, each switched from "" to its
    prediction; a threshold is the odds of the last question switched), with two differences
    that make the threshold reproduce the score when applied ("" exactly where odds > it):
    questions with equal odds are switched together (the official loop may stop inside such a
    group, which no threshold can do), and when answering nothing is best the threshold lies
    below every odds (the official loop returns 0.0 there).

    Returns:
        (best score in percent, threshold).
    """
    current = best = float(sum(1 for q in scores if not has_answer[q]))
    ordered = sorted(scores, key=lambda q: null_odds[q])
    threshold = null_odds[ordered[0]] - 1.0 if ordered else 0.0
    for i, qid in enumerate(ordered):
        if has_answer[qid]:
            current += scores[qid]
        else:
            current -= 1.0 if predictions[qid] else 0.0
        if i + 1 < len(ordered) and null_odds[ordered[i + 1]] == null_odds[qid]:
            continue  # the rest of a group of equal odds goes with it
        if current > best:
            best, threshold = current, float(null_odds[qid])
    return 100.0 * best / max(len(scores), 1), threshold


def best_null_threshold(gold: Mapping[str, Sequence[str]], answers: Mapping[str, str],
                        null_odds: Mapping[str, float], scoring: str = "auto"
                        ) -> tuple[float, float]:
    """The SQuAD v2.0 `null_score_diff_threshold` with the best F1 on scored questions.

    The search is evaluate-v2.0.py's best-threshold search on F1 (`_best_threshold`), run on
    each question's best non-null answer: with `answers` from
    `postprocess_predictions(..., null_score_diff_threshold=math.inf)` every threshold is
    tried on what the model would answer, where predictions already cut at 0.0 would score the
    thresholds above 0 as if those questions had no span. The null odds are Google's
    null score - best span score (null_odds.json), so the threshold applies as Google's
    run_squad.py applies it: answer "" when the odds exceed it.

    Args:
        gold: dict. Question id -> gold answer texts ([] = unanswerable).
        answers: dict. Question id -> the best non-null answer ("" when there is no span).
            Questions without one are left out, as evaluate-v2.0.py leaves them out.
        null_odds: dict. Question id -> null score - best span score.
        scoring: str. "squad", "cmrc2018" or "auto" (`detect_scoring`).

    Returns:
        (threshold, F1 in percent that answering with it scores).

    Example:
    >>> gold = {"a": ["Paris"], "b": []}
    >>> best_null_threshold(gold, {"a": "Paris", "b": "Rome"}, {"a": -2.0, "b": 1.5})
    (-2.0, 100.0)
    """
    if scoring == "auto":
        scoring = detect_scoring(gold)
    scored = [q for q in gold if q in answers]
    missing = [q for q in scored if q not in null_odds]
    if missing:
        raise ValueError(f"{len(missing)} question(s) have an answer but no null odds, e.g. "
                         f"{missing[0]!r}")
    has_answer, _, f1 = _per_question(gold, answers, scoring)
    best, threshold = _best_threshold(answers, f1, null_odds, has_answer)
    return threshold, best


def apply_null_threshold(answers: Mapping[str, str], null_odds: Mapping[str, float],
                         threshold: float) -> dict[str, str]:
    """Google's v2.0 rule on best non-null answers: "" where null odds > threshold."""
    return {q: "" if q in null_odds and null_odds[q] > threshold else a
            for q, a in answers.items()}


def _per_question(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                  scoring: str, null_odds: Mapping[str, float] | None = None,
                  null_odds_threshold: float | None = None
                  ) -> tuple[dict[str, bool], dict[str, float], dict[str, float]]:
    """evaluate-v2.0.py's per-question part: (has_answer for every gold question, exact and
    F1 for those with a prediction)."""
    exact_fn, f1_fn = SCORERS[scoring]
    has_answer: dict[str, bool] = {}
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    # evaluate-v2.0.py drops gold answers that normalise to ""; CMRC text is only stripped.
    nonempty = normalize_answer if scoring == "squad" else str.strip
    for qid, answers in gold.items():
        texts = [a for a in answers if nonempty(a)] or [""]
        has_answer[qid] = texts != [""]
        if qid not in predictions:
            continue
        prediction = predictions[qid]
        if null_odds_threshold is not None and null_odds and null_odds[qid] > null_odds_threshold:
            prediction = ""
        exact[qid] = _max_over_gold(exact_fn, texts, prediction)
        f1[qid] = _max_over_gold(f1_fn, texts, prediction)
    return has_answer, exact, f1


def squad_v2_scores(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                    null_odds: Mapping[str, float] | None = None, scoring: str = "squad",
                    null_odds_threshold: float | None = None) -> dict[str, float]:
    """Exact match and F1 with unanswerable questions, as evaluate-v2.0.py.

    Args:
        gold: dict. Question id -> gold answer texts; [] (or only empty texts) = unanswerable.
        predictions: dict. Question id -> predicted text ("" = no answer). Questions without a
            prediction are left out of the totals (counted in `missing`).
        null_odds: dict or None. Question id -> how strongly the model prefers "no answer" (any
            monotone score). With it the result adds `best_exact_match`/`best_f1` and their
            thresholds.
        scoring: str. "squad" or "cmrc2018".
        null_odds_threshold: float or None. When given, a question whose null odds exceed it
            counts as answered "" (evaluate-v2.0.py's --na-prob-thresh).

    Returns:
        dict with `exact_match`, `f1`, `total`, `missing`, and `HasAns_*` / `NoAns_*` parts.
    """
    has_answer, exact, f1 = _per_question(gold, predictions, scoring, null_odds,
                                          null_odds_threshold)

    def summary(qids: list[str]) -> dict[str, float]:
        n = max(len(qids), 1)
        return {"exact_match": 100.0 * sum(exact[q] for q in qids) / n,
                "f1": 100.0 * sum(f1[q] for q in qids) / n, "total": len(qids)}

    scored = list(exact)
    out = summary(scored)
    out["missing"] = len(gold) - len(scored)
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        part = [q for q in scored if has_answer[q] == wanted]
        if part:
            out.update({f"{name}_{k}": v for k, v in summary(part).items()})
    if null_odds is not None and scored:
        answered = {q: predictions[q] for q in scored}
        out["best_exact_match"], out["best_exact_match_threshold"] = _best_threshold(
            answered, exact, null_odds, has_answer)
        out["best_f1"], out["best_f1_threshold"] = _best_threshold(
            answered, f1, null_odds, has_answer)
    return out


def evaluate(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
             version_2_with_negative: bool = False, scoring: str = "auto",
             null_odds: Mapping[str, float] | None = None) -> dict[str, float | str]:
    """Scores predictions against gold answers: the one entry point the QA runner uses.

    Args:
        gold: dict. Question id -> gold answer texts ([] = unanswerable, v2.0 only).
        predictions: dict. Question id -> predicted text.
        version_2_with_negative: bool. Score as SQuAD v2.0 (unanswerable questions).
        scoring: str. "squad", "cmrc2018" (character-level, for Chinese) or "auto" (cmrc2018
            when most gold answers contain Chinese characters).
        null_odds: dict or None. v2.0 only: null odds per question (adds the best thresholds).

    Returns:
        dict with `exact_match` and `f1` (percent), `total`, `missing`, `scoring`, and the v2.0
        breakdown when asked.

    Example:
    >>> evaluate({"q1": ["Denver Broncos"]}, {"q1": "the Denver Broncos!"})["exact_match"]
    100.0
    >>> round(evaluate({"q1": ["北京天安门"]}, {"q1": "北京"})["f1"], 2)  # CMRC: characters
    57.14
    """
    if scoring == "auto":
        scoring = detect_scoring(gold)
    if scoring not in SCORERS:
        raise ValueError(f"scoring must be 'auto' or one of {sorted(SCORERS)}, got {scoring!r}")
    if version_2_with_negative:
        result: dict[str, float | str] = dict(squad_v2_scores(gold, predictions, null_odds,
                                                              scoring))
    else:
        result = dict(squad_v1_scores(gold, predictions, scoring))
    result["scoring"] = scoring
    return result
