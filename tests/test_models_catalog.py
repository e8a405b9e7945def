"""tfbert.models.catalog: the model classes a tfbert directory may name, by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import pytest
from model_test_utils import tiny_config

import tfbert
from tfbert.checkpoints import CheckpointError
from tfbert.models import catalog, weights
from tfbert.models.classifier import BertClassifier, MultiLabelCrossentropy, WindowPooledClassifier
from tfbert.models.encoder import BertEncoder, FeatureDictModel
from tfbert.models.pretrainer import BertPretrainer
from tfbert.models.span_labeler import BertSpanLabeler
from tfbert.models.task import BertTask
from tfbert.models.token_classifier import BertTokenClassifier

BUILTIN = (BertEncoder, BertPretrainer, BertClassifier, BertTokenClassifier, BertSpanLabeler)


@keras.saving.register_keras_serializable(package="catalog_test")
class UserClassifier(BertClassifier):
    """A user's task model, known to Keras as "catalog_test>UserClassifier"."""


def _subclasses(cls: type) -> set[type]:
    return {c for sub in cls.__subclasses__() for c in {sub, *_subclasses(sub)}}


def test_the_catalog_holds_the_encoder_and_every_task_model_of_tfbert_models():
    classes = catalog.model_classes()
    for cls in BUILTIN:
        assert classes[cls.__name__] is cls
    tfbert_tasks = {c for c in _subclasses(BertTask) if c.__module__.startswith("tfbert.models.")}
    assert set(classes.values()) == {BertEncoder, *tfbert_tasks}
    assert list(classes) == sorted(classes)
    for helper in (BertTask, FeatureDictModel, WindowPooledClassifier, MultiLabelCrossentropy,
                   UserClassifier):
        assert helper.__name__ not in classes
    assert catalog.model_classes() is classes  # imported and collected once


def test_find_gives_tfbert_classes_then_keras_registered_ones_then_none():
    assert catalog.find("BertSpanLabeler") is BertSpanLabeler
    assert catalog.find("catalog_test>UserClassifier") is UserClassifier
    assert catalog.find("UserClassifier") is None  # Keras knows it by its package name only
    assert catalog.find("WindowPooledClassifier") is None
    assert catalog.find("NoSuchModel") is None
    assert catalog.find("") is None


def test_a_user_class_is_saved_under_its_keras_name_and_loads_as_itself(tmp_path):
    model = UserClassifier(BertEncoder(tiny_config()), num_classes=3)
    assert weights.describe(model)["model_class"] == "catalog_test>UserClassifier"
    assert weights.describe(BertClassifier(model.encoder, num_classes=3))["model_class"] == (
        "BertClassifier")
    tfbert.save_pretrained(model, str(tmp_path / "user"))
    loaded = tfbert.checkpoints.load_model(str(tmp_path / "user"))
    assert type(loaded) is UserClassifier and loaded.num_classes == 3


def test_an_unknown_model_class_is_refused_naming_the_builtin_ones(tmp_path):
    path = str(tmp_path / "model")
    tfbert.save_pretrained(BertEncoder(tiny_config()), path)
    with open(os.path.join(path, "tfbert.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    with open(os.path.join(path, "tfbert.json"), "w", encoding="utf-8") as f:
        json.dump({**metadata, "model_class": "NoSuchModel"}, f)
    with pytest.raises(CheckpointError, match="'NoSuchModel' is neither one of") as error:
        tfbert.checkpoints.load_model(path)
    assert all(repr(cls.__name__) in str(error.value) for cls in BUILTIN)


def test_a_fresh_python_loads_a_saved_task_model_as_its_class(tmp_path):
    path = str(tmp_path / "ner")
    tfbert.save_pretrained(BertTokenClassifier(BertEncoder(tiny_config()), num_classes=5), path)
    code = ("import sys, tfbert\n"
            f"model = tfbert.checkpoints.load_model({path!r})\n"
            "print(type(model).__module__, type(model).__name__, model.num_classes,\n"
            "      sorted(m for m in sys.modules if m.startswith('tfbert.tasks')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "tfbert.models.token_classifier BertTokenClassifier 5 []"
