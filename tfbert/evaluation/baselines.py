"""The simplest baselines for the built-in fine-tuning tasks, to read tfbert's scores against.

ner        People's Daily NER (`tfbert.data.ner.people_daily_ner`): a character BiLSTM tagger
           in plain Keras (embedding 128, BiLSTM 128 per direction, a dense to the 7 BIO tags;
           Adam 2e-3, batch 32), with a softmax (per-character cross-entropy over the real
           characters) or a linear-chain CRF (`tfbert.layers.crf`: trained with CrfLoss,
           decoded by Viterbi). Characters of the training sentences are its vocab (the rest map
           to one unknown id). Training reads each sentence's first `max_seq_length` characters;
           dev and test are tagged whole (every character gets a prediction), scored with
           `tfbert.evaluation.entity_metrics` as run_ner scores (seqeval's numbers). Like run_ner
           it scores dev after every epoch and keeps the best epoch's weights for test.
sentiment  Character n-gram TF-IDF + logistic regression on the built-in sentiment reviews
           (`tfidf_baseline`: n-gram range and C picked on dev); needs scikit-learn (the `test`
           extra).

demo.py and the quality table (`python -m bench.quality`) train them beside BERT;
`python -m experiments.baselines` runs one alone and writes its JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfbert.data import classification, ner
from tfbert.evaluation.classification import classification_metrics
from tfbert.evaluation.ner import entity_metrics
from tfbert.layers.crf import CrfLoss, LinearChainCrf

logger = logging.getLogger("baselines")

PAD, UNK = 0, 1  # character ids: padding, a character not in the training sentences


def char_vocab(examples: Sequence[Any]) -> dict[str, int]:
    """Character -> id over the tokens of `examples` (ids from 2, in order of first sight)."""
    vocab: dict[str, int] = {}
    for example in examples:
        for token in example.tokens:
            vocab.setdefault(token, len(vocab) + 2)
    return vocab


def encode(examples: Sequence[Any], vocab: dict[str, int], labels: Sequence[str],
           max_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(character ids, tag ids), int32 [N, L]: each sentence's first `max_length` tokens (all of
    them with None), padded with PAD (tag 0) to the longest."""
    index = {name: i for i, name in enumerate(labels)}
    rows = [e.tokens[:max_length] if max_length else e.tokens for e in examples]
    width = max([len(r) for r in rows] + [1])
    ids = np.full((len(rows), width), PAD, np.int32)
    tags = np.zeros((len(rows), width), np.int32)
    for i, (row, example) in enumerate(zip(rows, examples, strict=True)):
        ids[i, :len(row)] = [vocab.get(t, UNK) for t in row]
        tags[i, :len(row)] = [index[t] for t in example.tags[:len(row)]]
    return ids, tags


def bilstm_tagger(vocab_size: int, num_tags: int, embedding_size: int = 128,
                  lstm_units: int = 128, crf: bool = False) -> Any:
    """A plain-Keras character BiLSTM tagger: int ids [B, L] (0 = padding) -> logits [B, L, C].

    With `crf`, the model holds a `tfbert.layers.LinearChainCrf` as `crf` (trained by
    `CrfLoss(model.crf)`; `model.crf(logits, mask)` decodes by Viterbi).
    """
    ids = keras.Input((None,), dtype="int32", name="char_ids")
    x = keras.layers.Embedding(vocab_size, embedding_size, mask_zero=True)(ids)  # [B, L, E]
    x = keras.layers.Bidirectional(keras.layers.LSTM(lstm_units, return_sequences=True))(x)
    # [B, L, C], carrying the padding mask (the losses leave padded positions out either way:
    # sample weights, and CrfLoss reads the mask)
    logits = keras.layers.Dense(num_tags, name="logits")(x)
    model = keras.Model(ids, logits, name="bilstm_crf" if crf else "bilstm")
    if crf:
        model.crf = LinearChainCrf(num_tags, name="crf")  # tracked: its weights train
    else:
        model.crf = None
    return model


def predict_tags(model: Any, ids: np.ndarray, lengths: Sequence[int], labels: Sequence[str],
                 batch_size: int = 64) -> list[list[str]]:
    """Tags of each sentence from the tagger (argmax, or Viterbi with a CRF)."""
    logits = model.predict(ids, batch_size=batch_size, verbose=0)  # [N, L, C]
    predicted = (np.asarray(model.crf(logits, ids != PAD)) if model.crf is not None
                 else logits.argmax(-1))
    return [[labels[int(t)] for t in row[:n]] for row, n in zip(predicted, lengths, strict=True)]


def train_bilstm(train: Sequence[Any], dev: Sequence[Any], test: Sequence[Any],
                 labels: Sequence[str], epochs: int = 3, batch_size: int = 32,
                 learning_rate: float = 2e-3, max_seq_length: int = 128, crf: bool = False,
                 embedding_size: int = 128, lstm_units: int = 128, seed: int = 42,
                 train_eval_examples: int = 1000, patience: int | None = None
                 ) -> dict[str, Any]:
    """Trains the BiLSTM tagger, scoring dev (and the first `train_eval_examples` training
    sentences) after every epoch; test is scored with the best dev epoch's weights. With
    `patience`, training stops once dev F1 has not improved for that many epochs (early
    stopping: `epochs` is then the most it trains).

    Args:
        train, dev, test: sequences of tfbert.data.ner.NerExample.
        labels: sequence of str. Tag names in id order.
        epochs, batch_size, learning_rate: int, int, float. Adam's run.
        max_seq_length: int. Characters of a training sentence read (its first ones).
        crf: bool. A linear-chain CRF over the logits instead of the softmax.
        embedding_size, lstm_units: int. Character embedding width; LSTM units per direction.
        seed: int. Weights and data order.
        train_eval_examples: int. Training sentences scored after each epoch (the fit).
        patience: int or None. Epochs without a better dev F1 before stopping; None: train
            all `epochs`.

    Returns:
        {"history": [{"epoch", "train_loss", "train_f1", "dev_f1"}], "best_epoch",
         "num_train_steps", "dev", "test", "train_fit"} (dev/test/train_fit: entity_metrics of
        the best epoch).
    """
    keras.utils.set_random_seed(seed)
    vocab = char_vocab(train)
    x, y = encode(train, vocab, labels, max_seq_length)
    weights = (x != PAD).astype(np.float32)
    model = bilstm_tagger(len(vocab) + 2, len(labels), embedding_size, lstm_units, crf)
    if crf:
        loss = CrfLoss(model.crf)
    else:  # the mean over the real characters of the batch, as run_ner averages its pieces
        loss = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=loss)
    ds = (tf.data.Dataset.from_tensor_slices((x, y, weights))
          .shuffle(len(x), seed=seed, reshuffle_each_iteration=True).batch(batch_size))
    fit_split = train[:train_eval_examples]
    encoded = {name: (encode(split, vocab, labels)[0], [len(e.tokens) for e in split], split)
               for name, split in (("train", fit_split), ("dev", dev), ("test", test))}

    def score(name: str) -> dict[str, Any]:
        ids, lengths, split = encoded[name]
        return entity_metrics([e.tags for e in split], predict_tags(model, ids, lengths, labels))

    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {}

    def on_epoch_end(epoch: int, logs: dict[str, Any]) -> None:
        fit, dev_scores = score("train"), score("dev")
        history.append({"epoch": epoch + 1, "train_loss": float(logs["loss"]),
                        "train_f1": fit["f1"], "dev_f1": dev_scores["f1"]})
        logger.info("epoch %d: loss %.4f, train F1 %.4f, dev F1 %.4f", epoch + 1,
                    logs["loss"], fit["f1"], dev_scores["f1"])
        if not best or dev_scores["f1"] > best["dev"]["f1"]:
            best.update(epoch=epoch + 1, dev=dev_scores, train_fit=fit,
                        weights=model.get_weights())
        elif patience is not None and epoch + 1 - best["epoch"] >= patience:
            model.stop_training = True

    model.fit(ds, epochs=epochs, verbose=0, shuffle=False,  # (the dataset shuffles)
              callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=on_epoch_end)])
    model.set_weights(best["weights"])
    return {"history": history, "best_epoch": best["epoch"],
            "num_train_steps": len(history) * -(-len(x) // batch_size), "dev": best["dev"],
            "test": score("test"), "train_fit": best["train_fit"], "vocab_size": len(vocab) + 2}


def ner_baseline(max_train_examples: int | None = None, max_eval_examples: int | None = None,
                 **kwargs: Any) -> dict[str, Any]:
    """The BiLSTM tagger (`train_bilstm`, whose keyword arguments it takes) on the built-in
    People's Daily NER: the first max_train_examples training and max_eval_examples dev and
    test sentences, as run_ner's flags of those names take them."""
    splits = {s: ner.people_daily_ner(s) for s in ("train", "dev", "test")}
    train = splits["train"][:max_train_examples]
    dev, test = (splits[s][:max_eval_examples] for s in ("dev", "test"))
    result = train_bilstm(train, dev, test, list(ner.PEOPLE_DAILY_LABELS), **kwargs)
    return {"num_train": len(train), "num_dev": len(dev), "num_test": len(test), **result}


def tfidf_baseline(grid: tuple[tuple[int, float], ...] = ((2, 1.0), (2, 3.0), (2, 10.0),
                                                       (3, 1.0), (3, 3.0), (3, 10.0),
                                                       (3, 30.0), (3, 100.0)),
                   max_train_examples: int | None = None,
                   max_eval_examples: int | None = None) -> dict[str, Any]:
    """Character n-gram TF-IDF + logistic regression on built-in `sentiment`.

    The n-gram range (1..n) and the inverse regularisation C are picked on dev accuracy from
    `grid`; the reported test accuracy is that of the setting picked on dev. With
    `max_train_examples` / `max_eval_examples`, only the first N training / dev and test
    reviews are used (as the BERT runs' flags of those names take them).
    """
    # scikit-learn loads when a baseline is trained (it is slow to import)
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    labels = classification.builtin_labels("sentiment")
    splits = {s: classification.builtin_examples("sentiment", s) for s in ("train", "dev", "test")}
    splits["train"] = splits["train"][:max_train_examples]
    for split in ("dev", "test"):
        splits[split] = splits[split][:max_eval_examples]
    ids = {s: classification.label_ids(examples, labels) for s, examples in splits.items()}
    best: dict[str, Any] | None = None
    for ngram_max, c in grid:
        vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, ngram_max),
                                     sublinear_tf=True, min_df=2)
        classifier = LogisticRegression(C=c, max_iter=2000)
        classifier.fit(vectorizer.fit_transform([e.text for e in splits["train"]]), ids["train"])
        predicted = {s: classifier.predict(vectorizer.transform([e.text for e in splits[s]]))
                     for s in ("dev", "test")}
        dev = classification_metrics(ids["dev"], predicted["dev"], labels)
        logger.info("TF-IDF char 1-%d-grams, C=%g: dev accuracy %.4f", ngram_max, c,
                    dev["accuracy"])
        if best is None or dev["accuracy"] > best["dev"]["accuracy"]:
            best = {"num_train": len(splits["train"]),
                    "config": {"ngram_range": [1, ngram_max], "C": c}, "dev": dev,
                    "test": classification_metrics(ids["test"], predicted["test"], labels)}
    assert best is not None
    return best
