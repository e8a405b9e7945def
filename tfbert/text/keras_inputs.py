"""Lets a text layer take its inputs as they are given (strings, ragged tensors, Python values)."""

from __future__ import annotations

import keras


def take_inputs_as_given(layer: keras.layers.Layer) -> None:
    """Makes `layer(x)` pass x to `call` unchanged.

    By default a Keras 3 Layer converts positional arguments to tensors of its dtype and refuses
    positional arguments that are not tensors (a Python str, a tuple of ragged segments). Keras has
    no public switch for either: its own preprocessing layers (StringLookup, TextVectorization,
    Hashing) and keras-hub's PreprocessingLayer set the same two private attributes. Checked on
    keras 3.15.1.

    Args:
        layer: keras.layers.Layer. Called from the layer's `__init__`, after `super().__init__`.
    """
    layer._convert_input_args = False
    layer._allow_non_tensor_positional_args = True
