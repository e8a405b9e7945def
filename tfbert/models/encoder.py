"""BertEncoder: the one BERT backbone every task model wraps.

Shape legend: B = batch, T = sequence length, H = hidden size, N = attention heads,
D = H / N (head size), I = intermediate size, V = vocab size, L = layers,
P = max_position_embeddings, S = type_vocab_size.

Variable layout (for checkpoint conversion). Left: the reference name (Google's TF1 checkpoint;
Hugging Face uses the same path with "." and weight/bias), right: the attribute of a
`BertEncoder` and its Keras variable with the layout it stores. Kernels are [in, out] like TF1's
`kernel` (HF's torch `weight` is [out, in]: transpose).

  bert/embeddings/word_embeddings            embeddings.word_embeddings.embeddings       [V, H]
  bert/embeddings/position_embeddings        embeddings.position_embeddings.embeddings   [P, H]
  bert/embeddings/token_type_embeddings      embeddings.token_type_embeddings.embeddings [S, H]
  bert/embeddings/LayerNorm/gamma, beta      embeddings.layer_norm.gamma, .beta           [H]
  bert/encoder/layer_{i}/ ...                transformer_layers[i]. ...
    attention/self/query/kernel              attention.query_dense.kernel      [H, N, D]
    attention/self/query/bias                attention.query_dense.bias        [N, D]
    attention/self/key/kernel, bias          attention.key_dense.kernel, .bias   (as query)
    attention/self/value/kernel, bias        attention.value_dense.kernel, .bias (as query)
    attention/output/dense/kernel            attention.output_dense.kernel     [N, D, H]
    attention/output/dense/bias              attention.output_dense.bias       [H]
    attention/output/LayerNorm/gamma, beta   attention_layer_norm.gamma, .beta [H]
    intermediate/dense/kernel, bias          intermediate_dense.kernel [H, I], .bias [I]
    output/dense/kernel, bias                output_dense.kernel [I, H], .bias [H]
    output/LayerNorm/gamma, beta             output_layer_norm.gamma, .beta    [H]
  bert/pooler/dense/kernel, bias             pooler.kernel [H, H], pooler.bias [H]

So a reference Q/K/V kernel [H, H] is reshaped to [H, N, D] (bias [H] -> [N, D]) and the
attention output kernel [H, H] to [N, D, H]; the head index is the slower-varying part of the
reference's hidden axis, as in `transpose_for_scores`. Keras variable paths (`variable.path`)
are `embeddings/word_embeddings/embeddings`, `embeddings/LayerNorm/gamma`,
`layer_0/attention/query/kernel`, `layer_0/attention/attention_output/kernel`,
`layer_0/attention_LayerNorm/gamma`, `layer_0/intermediate/kernel`, `layer_0/output/kernel`,
`layer_0/output_LayerNorm/gamma`, `pooler/kernel`; but map through the attributes above, which
do not depend on build order.

Pretraining heads (on `BertPretrainer`):

  cls/predictions/transform/dense/kernel, bias   mlm_head.transform_dense.kernel [H, H], .bias
  cls/predictions/transform/LayerNorm/gamma, beta mlm_head.transform_layer_norm.gamma, .beta
  cls/predictions/output_bias                    mlm_head.output_bias           [V]
  (decoder weight)                               tied: embeddings.word_embeddings.embeddings
  cls/seq_relationship/output_weights            nsp_head.kernel [H, 2] (reference is [2, H])
  cls/seq_relationship/output_bias               nsp_head.bias   [2]

Fine-tuning heads (Keras variable path in brackets): BertClassifier `hidden_layers[i]`
[head_hidden_{i}/kernel, bias] and `output_dense` [logits/kernel [.., C], bias [C]];
BertTokenClassifier `output_dense` [logits/...]; BertSpanLabeler `output_dense`
[span_logits/kernel [H, 2], bias [2]] (reference run_squad `cls/squad/output_weights` is [2, H],
column 0 = start, 1 = end).
"""

from __future__ import annotations

from typing import Any, ClassVar

import keras
from keras import ops

from tfbert.config import BertConfig
from tfbert.layers.embeddings import BertEmbeddings
from tfbert.layers.transformer import BertTransformerLayer
from tfbert.models import pretrained

ENCODER_INPUTS = ("input_ids", "input_mask", "segment_ids")


class FeatureDictModel(keras.Model):
    """A functional model fed a feature dict: keys it does not take are dropped before the call.

    Pretraining batches carry labels (`masked_lm_ids`, ...) next to the inputs; Keras would
    otherwise pair dict entries with inputs by position. Both `__call__` (TF/eager path) and
    `call` (JAX's stateless path) select the model's own inputs by name.
    """

    def _select_inputs(self, inputs: Any) -> Any:
        names = self.input
        if not isinstance(inputs, dict) or not isinstance(names, dict):
            return inputs
        missing = [name for name in names if name not in inputs]
        if missing:
            raise ValueError(f"{type(self).__name__} {self.name!r} needs inputs {missing}; "
                             f"got keys {sorted(inputs)}")
        return {name: inputs[name] for name in names}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (self._select_inputs(args[0]), *args[1:])
        elif "inputs" in kwargs:
            kwargs["inputs"] = self._select_inputs(kwargs["inputs"])
        return super().__call__(*args, **kwargs)

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        return super().call(self._select_inputs(inputs), training=training, mask=mask)


@keras.saving.register_keras_serializable(package="tfbert")
class BertEncoder(FeatureDictModel):
    """BERT (Devlin et al., 2018): embeddings, L post-LN transformer blocks, pooler.

    A Keras functional model. Inputs: dict of int32 [B, T] `input_ids`, `input_mask` (1 = real
    token, 0 = padding), `segment_ids`; extra keys in the dict are ignored. Outputs: dict with
    `sequence_output` [B, T, H], `pooled_output` [B, H] (dense + tanh on [CLS]),
    `encoder_outputs` (list of L tensors [B, T, H]) and, with `output_attention_probs=True`,
    `attention_probs` (list of L float32 tensors [B, N, T, T]). Under a mixed dtype policy the
    matmuls run in the half type while LayerNorm, softmax and the residual stream (hence
    `sequence_output`) stay float32. See the module docstring for the variable layout.

    Args:
        config: BertConfig or dict. The model shape (a dict goes through BertConfig.from_dict).
        output_attention_probs: bool. Also output every layer's attention probabilities.
        dtype: str or keras.DTypePolicy. Dtype policy; None uses the global policy.
        **kwargs: keras.Model arguments (name, trainable).

    Example:
    >>> config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                     num_attention_heads=4, intermediate_size=64)
    >>> encoder = BertEncoder(config)
    >>> ones = keras.ops.ones((2, 8), "int32")
    >>> out = encoder({"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0})
    >>> tuple(out["sequence_output"].shape), len(out["encoder_outputs"])
    ((2, 8, 32), 2)
    """

    # How checkpoints hold it and how `tfbert.models.catalog` and the loaders tell it apart:
    # "encoder" here, "task" for the task models, "pretrainer" for BertPretrainer.
    model_kind: ClassVar[str] = "encoder"

    def __init__(self, config: BertConfig | dict, output_attention_probs: bool = False,
                 dtype: Any = None, **kwargs: Any) -> None:
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        if not isinstance(config, BertConfig):
            raise TypeError(f"BertEncoder needs a BertConfig or dict, got {type(config).__name__}")
        config.validate()
        # === Layers ===
        init = lambda: keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        self.embeddings = BertEmbeddings(
            vocab_size=config.vocab_size, hidden_size=config.hidden_size,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size, dropout=config.hidden_dropout_prob,
            layer_norm_eps=config.layer_norm_eps, initializer_range=config.initializer_range,
            name="embeddings", dtype=dtype)
        self.transformer_layers = [
            BertTransformerLayer(
                hidden_size=config.hidden_size, num_attention_heads=config.num_attention_heads,
                intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
                hidden_dropout=config.hidden_dropout_prob,
                attention_dropout=config.attention_probs_dropout_prob,
                layer_norm_eps=config.layer_norm_eps, initializer_range=config.initializer_range,
                name=f"layer_{i}", dtype=dtype)
            for i in range(config.num_hidden_layers)]
        self.pooler = keras.layers.Dense(
            config.hidden_size, activation="tanh", kernel_initializer=init(), name="pooler",
            dtype=dtype)

        # === Functional Model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in ENCODER_INPUTS}
        outputs = self.forward(inputs, output_attention_probs=output_attention_probs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config ===
        self.config = config
        self.output_attention_probs = output_attention_probs

    def forward(self, inputs: dict[str, Any], training: bool | None = None,
                output_attention_probs: bool = False, last_layer_positions: Any = None
                ) -> dict[str, Any]:
        """The encoder's computation (its functional graph is this on symbolic inputs).

        Args:
            inputs: dict of int32 [B, T] `input_ids`, `input_mask`, `segment_ids`.
            training: bool or None. Dropout on when True.
            output_attention_probs: bool. Also return every layer's attention probabilities.
            last_layer_positions: int [B, Q] or None. Compute the last block only at these
                positions (`BertTransformerLayer`'s query_positions): `sequence_output` and the
                last of `encoder_outputs` are then [B, Q, H], holding exactly those rows of
                the full outputs, and `pooled_output` reads row 0, so position 0 ([CLS]) must
                come first for it to be BERT's pooled output.

        Returns:
            The outputs dict of the class docstring.
        """
        x = self.embeddings(inputs["input_ids"], inputs["segment_ids"],
                            training=training)  # [B, T, H]
        attention_mask = ops.expand_dims(ops.cast(inputs["input_mask"], "bool"), 1)  # [B, 1, T]
        encoder_outputs, attention_probs = [], []
        last = len(self.transformer_layers) - 1
        for i, layer in enumerate(self.transformer_layers):
            x = layer(x, attention_mask=attention_mask, training=training,
                      return_attention_probs=output_attention_probs,
                      query_positions=last_layer_positions if i == last else None)
            if output_attention_probs:
                x, probs = x  # probs: [B, N, T, T]
                attention_probs.append(probs)
            encoder_outputs.append(x)  # [B, T, H]
        pooled_output = self.pooler(x[:, 0, :])  # [B, H]
        outputs = {"sequence_output": x, "pooled_output": pooled_output,
                   "encoder_outputs": encoder_outputs}
        if output_attention_probs:
            outputs["attention_probs"] = attention_probs
        return outputs

    def get_config(self) -> dict[str, Any]:
        # Not chained to super(): a functional model's config is its graph, and the graph is a
        # function of these constructor arguments.
        return {"config": self.config.to_dict(),
                "output_attention_probs": self.output_attention_probs,
                "name": self.name, "trainable": self.trainable,
                "dtype": keras.dtype_policies.serialize(self.dtype_policy)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BertEncoder:
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)

    @classmethod
    def from_pretrained(cls, path: str, **kwargs: Any) -> BertEncoder:
        """The encoder of a checkpoint directory (HF, Google TF1, keras-hub or tfbert's own
        format; a fine-tuned checkpoint's head is left out).

        Args:
            path: str. Checkpoint directory; see `tfbert.from_pretrained`.
            **kwargs: passed to `tfbert.from_pretrained` (config, strict).
        """
        return pretrained.model_from_pretrained(cls, path, **kwargs)
