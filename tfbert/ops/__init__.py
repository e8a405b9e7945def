"""Speed forms of tfbert's layers for particular hardware, chosen by one switch.

The plain model is `tfbert.layers`: Keras layers and keras.ops. Where a layer has a faster
form on some backend or device, it calls one function of this package, which runs either
keras's own computation or the faster form, by the active form set:

    forms()            the active `Forms`: the innermost `use_forms(name)` block's set, else
                       `default_forms()`, decided by the Keras backend and the device:
                       "plain" off TensorFlow, "tensorflow_cpu" / "tensorflow_gpu" on it
    use_forms(name)    a `with` block tracing another set: "plain" (keras.ops only: what the
                       tests pin each form to), "stock" (the TFLite export), ...

The forms (one field of `Forms` each; figures in docs/performance.md, section named):

    linear.py     dense, project_heads,      2-D matmul + BiasAdd   "Projections as 2-D matmuls",
                  merge_heads, linear_2d                            "Feed-forward: fused MatMul +
                                                                    bias + GELU"
    attention.py  attention_scores,          heads-first core       "Attention core"
                  attention_context, swap_axes_1_2
    norm.py       layer_norm                 fused LayerNorm        "LayerNorm form"
    rng.py        dropout                    16-bit dropout draws   "Dropout RNG"
    switch.py     Forms, FORM_SETS, forms, use_forms, default_forms, has_gpu

Every form gives the plain computation's values and gradients (tests/test_graph_forms.py,
tests/test_layer_norm.py, tests/test_layers.py).

Example:
>>> from tfbert import ops
>>> ops.forms().name in ("tensorflow_cpu", "tensorflow_gpu")  # the TensorFlow backend
True
>>> with ops.use_forms("plain"):
...     ops.forms().name
'plain'
"""

from tfbert.ops.attention import attention_context, attention_scores, swap_axes_1_2
from tfbert.ops.linear import dense, linear_2d, merge_heads, project_heads
from tfbert.ops.norm import layer_norm
from tfbert.ops.rng import dropout
from tfbert.ops.switch import FORM_SETS, Forms, default_forms, forms, has_gpu, use_forms

__all__ = ["FORM_SETS", "Forms", "attention_context", "attention_scores", "default_forms",
           "dense", "dropout", "forms", "has_gpu", "layer_norm", "linear_2d", "merge_heads",
           "project_heads", "swap_axes_1_2", "use_forms"]
