"""The tfbert model classes by name: what tfbert.json's "model_class" may name.

A model class is a class defined in a module of `tfbert.models` that
  - subclasses `keras.Model`,
  - has a `model_kind` (how a checkpoint holds its weights: "encoder" for BertEncoder,
    "task" for BertTask and its subclasses, "pretrainer" for BertPretrainer), and
  - is registered with Keras under package "tfbert" (`keras.saving.register_keras_serializable`).
So BertTask, the unregistered base of the task models, is not one, nor are the helper models
without a `model_kind` such as WindowPooledClassifier. The catalog imports every module of the
package the first time it is asked: a new model module in tfbert/models/ is found with no other
edit. The loaders (`tfbert.models.weights`, `tfbert.models.pretrained`) find classes here and
import no model module themselves, so the models' `from_pretrained` can import them.

    >>> from tfbert.models import catalog
    >>> catalog.find("BertClassifier").__module__
    'tfbert.models.classifier'
    >>> "WindowPooledClassifier" in catalog.model_classes(), catalog.find("NoSuchModel")
    (False, None)
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil

import keras

import tfbert.models


@functools.cache
def model_classes() -> dict[str, type]:
    """{class name: class} for every tfbert model class, in name order (see the module doc)."""
    found = {}
    for module_info in pkgutil.iter_modules(tfbert.models.__path__, "tfbert.models."):
        module = importlib.import_module(module_info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and _is_model_class(cls):
                found[name] = cls
    return dict(sorted(found.items()))


def find(name: str) -> type | None:
    """The tfbert model class called `name`, else the Keras-registered class of that name
    (e.g. a user's "my_package>MyClassifier"), else None."""
    return model_classes().get(name) or keras.saving.get_registered_object(name)


def _is_model_class(cls: type) -> bool:
    return (issubclass(cls, keras.Model) and getattr(cls, "model_kind", None) is not None
            and keras.saving.get_registered_name(cls) == f"tfbert>{cls.__name__}")
