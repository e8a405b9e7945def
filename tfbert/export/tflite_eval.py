"""Measures .tflite files: outputs on texts, classification accuracy, NER entity F1,
agreement of the text model's ids with the reference tokenizer's.

    accuracy = folder_accuracy("saved_models/sentiment/tflite", "output/sentiment/model",
                               texts, labels)
    scores = evaluate_ner("saved_models/ner/tflite/model_ids_int8.tflite", examples,
                          "output/ner/model/vocab.txt", spec)  # {"f1": ..., ...}
    agreement = measure_agreement("vocab.txt", spec, texts)  # {"equal_texts": ..., ...}
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from tfbert.data import ner
from tfbert.errors import UserError
from tfbert.evaluation.ner import entity_metrics
from tfbert.export import load_for_export
from tfbert.export.saved_model import ExportSpec
from tfbert.export.tflite import make_interpreter, run_tflite
from tfbert.export.tflite_text import TextPacker
from tfbert.text.preprocessor import BertPreprocessor
from tfbert.text.tokenizer import BertTokenizer
from tfbert.text.vocab import load_vocab


def run_text_tflite(tflite_path: str, texts: Sequence[str],
                    texts_b: Sequence[str] | None = None,
                    output: str = "probabilities") -> np.ndarray:
    """One output of a text-in .tflite model (TF Text kernels registered) for a batch of texts.

    Args:
        tflite_path: str. A model_text_*.tflite file.
        texts: sequence of str. The `text` input.
        texts_b: sequence of str or None. The `text_b` input of pair / QA models.
        output: str. Output name: "probabilities", "label_ids", "logits", "start_logits", ...

    Returns:
        The output array, batch first.
    """
    inputs = {"text": np.array([t.encode() for t in texts], dtype=object)}
    if texts_b is not None:
        inputs["text_b"] = np.array([t.encode() for t in texts_b], dtype=object)
    outputs = run_tflite(make_interpreter(tflite_path, text_ops=True), inputs)
    if output not in outputs:
        raise KeyError(f"tflite_eval.py: {tflite_path} has no output {output!r}; it has "
                       f"{sorted(outputs)}")
    return outputs[output]


def predict_labels(tflite_path: str, texts: Sequence[str], vocab_file: str | None = None,
                   spec: ExportSpec | None = None, batch_size: int = 64,
                   num_threads: int | None = None) -> np.ndarray:
    """The `label_ids` [N] of a classification .tflite file for single texts.

    Args:
        tflite_path: str. A model_ids_* (needs vocab_file and spec: inputs are made with
            tfbert.BertPreprocessor, the reference) or model_text_* file.
        texts: sequence of str. Single texts.
        vocab_file: str or None. For ids models.
        spec: ExportSpec or None. For ids models (seq_length, lower_case).
        batch_size: int. Texts per interpreter call.
        num_threads: int or None. Interpreter threads (None: TFLite's default, one).
    """
    text_model = "model_text_" in os.path.basename(tflite_path)
    interpreter = make_interpreter(tflite_path, text_ops=text_model, num_threads=num_threads)
    preprocessor = None
    if not text_model:
        if vocab_file is None or spec is None:
            raise UserError("tflite_eval.py: an ids model needs vocab_file and spec to tokenize")
        preprocessor = BertPreprocessor(vocab_file, spec.seq_length, lower_case=spec.lower_case)
    predicted = []
    for begin in range(0, len(texts), batch_size):
        chunk = list(texts[begin:begin + batch_size])
        if text_model:
            inputs = {"text": np.array([t.encode() for t in chunk], dtype=object)}
        else:
            inputs = {k: v.numpy() for k, v in preprocessor(tf.constant(chunk)).items()}
        predicted.append(run_tflite(interpreter, inputs)["label_ids"])
    return np.concatenate(predicted) if predicted else np.zeros([0], np.int32)


def evaluate_accuracy(tflite_path: str, texts: Sequence[str], labels: Sequence[int],
                      vocab_file: str | None = None, spec: ExportSpec | None = None,
                      batch_size: int = 64, num_threads: int | None = None) -> float:
    """Accuracy of a classification .tflite file on labelled texts: the fraction of texts
    whose `label_ids` equal the gold class id (`labels`, int); the other arguments are
    `predict_labels`'."""
    predicted = predict_labels(tflite_path, texts, vocab_file, spec, batch_size, num_threads)
    return float(np.sum(predicted == np.asarray(labels, np.int64))) / max(len(texts), 1)


def folder_accuracy(tflite_dir: str, model_dir: str, texts: Sequence[str],
                    labels: Sequence[str]) -> dict[str, float]:
    """Accuracy of every classification .tflite file in a folder on labelled texts.

    Args:
        tflite_dir: str. Folder with model_{ids,text}_*.tflite (export_tflite's output_dir).
        model_dir: str. The fine-tuned classification model directory (labels, vocab,
            max_seq_length).
        texts: sequence of str. Single texts.
        labels: sequence of str. Gold label names (as in the model's labels).

    Returns:
        {file name: accuracy}.

    Example:
    >>> from tfbert.data import classification
    >>> test = classification.builtin_examples("sentiment", "test")
    >>> folder_accuracy("saved_models/sentiment/tflite", "output/sentiment/model",
    ...                 [e.text for e in test], [e.label for e in test])  # doctest: +SKIP
    {'model_ids_float32.tflite': 0.91, ...}
    """
    _, vocab_file, spec, _ = load_for_export(model_dir)
    index = {name: i for i, name in enumerate(spec.labels)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise UserError(f"tflite_eval.py: labels {unknown[:5]} are not among the model's "
                        f"labels {spec.labels}")
    ids = [index[label] for label in labels]
    return {name: evaluate_accuracy(os.path.join(tflite_dir, name), texts, ids, vocab_file, spec)
            for name in sorted(os.listdir(tflite_dir)) if name.endswith(".tflite")}


def ner_features(examples: Sequence[ner.NerExample], vocab_file: str, spec: ExportSpec,
                 text_model: bool = False) -> ner.NerFeatures:
    """The packed windows a .tflite NER model reads for `examples`, as run_ner makes them.

    An ids model reads every window (spec.long_input, as in training); a text model packs the
    first window of each text only (tflite.py), so its features truncate: one window per
    example, the pieces past it tagged "O".
    """
    if spec.task != "ner":
        raise UserError(f"tflite_eval.py: NER scores need a NER model, not task {spec.task!r}")
    long_input = "truncate" if text_model else spec.long_input
    return ner.encode_examples(examples, BertTokenizer(vocab_file, lower_case=spec.lower_case),
                               spec.seq_length, spec.labels, long_input=long_input,
                               doc_stride=spec.doc_stride, label_alignment=spec.label_alignment)


def ner_tags(tflite_path: str, examples: Sequence[ner.NerExample], vocab_file: str,
             spec: ExportSpec, batch_size: int = 64, num_threads: int | None = None
             ) -> list[list[str]]:
    """Token-level tags of a .tflite NER model (its `tag_ids`: argmax, or the CRF's Viterbi
    path in the file) for every example, each piece read as run_ner reads it.

    Args:
        tflite_path: str. A model_ids_* file (every window of a long sentence, each piece from
            the window where it has the most context) or a model_text_* file (the text in,
            first window only).
        examples: sequence of NerExample. Sentences (their text is what a text model reads).
        vocab_file: str. The model's vocab.
        spec: ExportSpec. seq_length, labels, lower_case, long_input, doc_stride,
            label_alignment of the model (`load_for_export`).
        batch_size: int. Windows (texts) per interpreter call.
        num_threads: int or None. Interpreter threads (None: TFLite's default, one).

    Returns:
        One tag list per example, as long as its tokens.
    """
    text_model = "model_text_" in os.path.basename(tflite_path)
    features = ner_features(examples, vocab_file, spec, text_model)
    interpreter = make_interpreter(tflite_path, text_ops=text_model, num_threads=num_threads)
    rows = len(features.input_ids)
    if text_model:  # one window per example (truncate), in example order
        texts = [e.text.encode() for e in examples]
        batches = ({"text": np.array(texts[b:b + batch_size], dtype=object)}
                   for b in range(0, rows, batch_size))
    else:
        inputs = features.inputs()
        batches = ({k: v[b:b + batch_size] for k, v in inputs.items()}
                   for b in range(0, rows, batch_size))
    tag_ids = np.concatenate([run_tflite(interpreter, batch)["tag_ids"] for batch in batches])
    # -1 marks positions off the text ([CLS], [SEP], padding); no read piece sits there
    return ner.decode_predictions(features, np.maximum(tag_ids, 0), spec.labels)


def evaluate_ner(tflite_path: str, examples: Sequence[ner.NerExample], vocab_file: str,
                 spec: ExportSpec, batch_size: int = 64, num_threads: int | None = None
                 ) -> dict[str, object]:
    """Entity-level precision / recall / F1 of a .tflite NER model on tagged sentences
    (`tfbert.evaluation.ner.entity_metrics` of `ner_tags`; arguments as there)."""
    predicted = ner_tags(tflite_path, examples, vocab_file, spec, batch_size, num_threads)
    return entity_metrics([e.tags for e in examples], predicted)


def measure_agreement(vocab_file: str, spec: ExportSpec, texts: Sequence[str],
                      tflite_path: str | None = None, batch_size: int = 256
                      ) -> dict[str, float]:
    """How often the text model's input_ids equal the reference tokenizer + packer's.

    Args:
        vocab_file: str. The model's vocab.
        spec: ExportSpec. Sequence length and lower_case.
        texts: sequence of str. Single texts (the comparison packs segment a only).
        tflite_path: str or None. A model_text_*.tflite of a single-text model to run; None
            runs the same packing graph in TensorFlow (the TFLite kernels are TF Text's same
            C++ code).
        batch_size: int. Texts per call.

    Returns:
        {"texts": n, "equal_texts": fraction of texts with identical packed ids,
         "equal_tokens": fraction of reference pieces reproduced at the same position}.
    """
    if tflite_path is not None and spec.has_text_b:
        raise UserError("tflite_eval.py: measure_agreement compares single texts; give the "
                        "model_text file of a single-text model, or tflite_path=None")
    single = ExportSpec(task="encoder", seq_length=spec.seq_length, lower_case=spec.lower_case)
    reference = BertPreprocessor(vocab_file, spec.seq_length, lower_case=spec.lower_case)
    packer = TextPacker(load_vocab(vocab_file), single)
    interpreter = None if tflite_path is None else make_interpreter(tflite_path, text_ops=True)
    equal_texts = equal_tokens = total_tokens = 0
    for begin in range(0, len(texts), batch_size):
        chunk = list(texts[begin:begin + batch_size])
        want = reference(tf.constant(chunk))
        want_ids, want_mask = want["input_ids"].numpy(), want["input_mask"].numpy()
        if interpreter is None:
            got = packer(tf.constant(chunk))["input_ids"].numpy()
        else:
            args = {"text": np.array([t.encode() for t in chunk], dtype=object)}
            got = run_tflite(interpreter, args)["input_ids"]
        equal_texts += int(np.sum(np.all(got == want_ids, axis=1)))
        real = want_mask.astype(bool)
        equal_tokens += int(np.sum((got == want_ids) & real))
        total_tokens += int(real.sum())
    n = len(texts)
    return {"texts": n, "equal_texts": equal_texts / max(n, 1),
            "equal_tokens": equal_tokens / max(total_tokens, 1)}
