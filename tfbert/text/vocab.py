"""WordPiece vocab files: one token per line, the line number is the id.

BERT's special tokens must all be present; their ids come from the file, so both Google's layout
([PAD]=0, [UNK]=100, [CLS]=101, ...) and a compact one ([PAD], [UNK], [CLS], [SEP], [MASK] first)
work.

The file is read through `tfbert.textfiles`: UTF-8 unless `encoding` says otherwise, a
byte-order mark dropped (left in, it would glue itself to the first token), and any byte that
does not decode an error naming the line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from tfbert import textfiles
from tfbert.errors import UserError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
UNUSED = re.compile(r"\[unused\d+\]")  # placeholders Google's vocabs leave for new words


def load_vocab(path: str, encoding: str = textfiles.DEFAULT_ENCODING) -> list[str]:
    """Reads a vocab file and checks it.

    Lines keep everything but the line break (as `tokenizers` and `transformers` read them).

    Args:
        path: str. vocab.txt, one token per line (local or a `tf.io.gfile` path).
        encoding: str. Its text encoding.

    Returns:
        The tokens in id order.

    Raises:
        FileNotFoundError: no such file.
        UserError: undecodable bytes, a special token is missing, or a token is empty or
            repeated.
    """
    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"vocab file {path!r} does not exist")
    tokens = [line.rstrip("\r\n") for line in textfiles.read_lines(path, encoding)]
    return check_vocab(tokens, source=path)


def check_vocab(tokens: Sequence[str], source: str = "vocab") -> list[str]:
    """Checks a token list: specials present, no empty or repeated token.

    Args:
        tokens: sequence of str. The vocab in id order.
        source: str. Where the tokens came from, for error messages.

    Returns:
        The tokens as a new list.
    """
    tokens = list(tokens)
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if not token:
            raise UserError(f"{source}: line {i + 1} is an empty token")
        if token in seen:
            raise UserError(f"{source}: token {token!r} appears twice, on lines "
                             f"{seen[token] + 1} and {i + 1}")
        seen[token] = i
    missing = [t for t in SPECIAL_TOKENS if t not in seen]
    if missing:
        raise UserError(f"{source} has no {', '.join(missing)} (a BERT vocab needs all of "
                         f"{', '.join(SPECIAL_TOKENS)}); {len(tokens)} tokens, first ones: "
                         f"{tokens[:5]}")
    return tokens


def special_ids(tokens: Sequence[str]) -> dict[str, int]:
    """Ids of the special tokens: {"pad_id", "unk_id", "cls_id", "sep_id", "mask_id"}."""
    index = {t: i for i, t in enumerate(tokens) if t in SPECIAL_TOKENS}
    missing = [t for t in SPECIAL_TOKENS if t not in index]
    if missing:
        raise ValueError(f"vocab has no {', '.join(missing)}")
    return {"pad_id": index[PAD], "unk_id": index[UNK], "cls_id": index[CLS],
            "sep_id": index[SEP], "mask_id": index[MASK]}


def changed_ids(own: Sequence[str], other: Sequence[str]) -> list[int]:
    """Ids whose token differs between a model's vocab and another of the same size, leaving
    out `[unusedN]` entries of `own` (google-research/bert's way to add words to a trained
    vocab is to overwrite them).

    Args:
        own: sequence of str. The vocab the model was trained with.
        other: sequence of str. The vocab a run would tokenize with, as long as `own`.
    """
    return [i for i, (a, b) in enumerate(zip(own, other, strict=True))
            if a != b and not UNUSED.fullmatch(a)]
