"""`ServingHead`: what one kind of task model adds to an export.

The export (tfbert/export/saved_model.py, tflite.py, `load_for_export`) is the same for every
task: tokenizer and packer in the graph, input checks, padding trimmed, long texts in windows.
What differs is asked of the task's head, found by the name the task registry gives it
(`tfbert.tasks.registry.Task.export`, `registry.serving_head`): the `HEAD` of the module beside
its task, tfbert/tasks/*_serving.py, a `ServingHead` subclass. A new kind of output is one
new module there; a new task whose outputs an existing head serves names that head and adds
nothing. The heads sit below the export: they import no tfbert.export module; `spec` is the
export's ExportSpec and `module` its BertServingModule (tfbert/export/saved_model.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import tensorflow as tf

from tfbert.errors import UserError


class ServingHead:
    """One task's outputs in the SavedModel and TFLite signatures.

    Class attributes say what the head takes; a subclass overrides the methods whose default
    does not fit it. An instance serves one export: `BertServingModule` makes it with the
    model, the spec and itself (for its packer and character spans).

    Class attributes:
        name: str. The head's name: ExportSpec.task and the module's name.
        text_b: str. "never" (one text), "pair" (`text_b` when ExportSpec.pair) or "always"
            (QA: question and context).
        min_seq_length: int. The shortest max_seq_length it can serve.
        needs_labels: bool. The spec must carry label names.
        windows: bool. It serves long_input "windows" (`merge_windows`).
        question_first: bool. A pair is cut question first (to max_query_length), not longest
            first.
        metadata_keys: tuple of str. tfbert.json keys copied into the ExportSpec as they are.
    """

    name: ClassVar[str] = ""
    text_b: ClassVar[str] = "never"
    min_seq_length: ClassVar[int] = 3
    needs_labels: ClassVar[bool] = False
    windows: ClassVar[bool] = False
    question_first: ClassVar[bool] = False
    metadata_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, model: Any, spec: Any, module: Any) -> None:
        self.model, self.spec, self.module = model, spec, module

    # --- what the export is ----------------------------------------------------------------------

    @classmethod
    def served_model(cls, model: Any) -> Any:
        """The Keras model the export runs (the encoder head serves a pretrainer's encoder)."""
        return model

    @classmethod
    def spec_fields(cls, model: Any, metadata: dict[str, Any], model_dir: str) -> dict[str, Any]:
        """ExportSpec fields of this head from a model directory's tfbert.json (`metadata`);
        raises UserError where they contradict the model."""
        return {k: metadata[k] for k in cls.metadata_keys if k in metadata}

    @classmethod
    def check_spec(cls, spec: Any) -> None:
        """Raises UserError for a spec setting this head cannot serve."""
        if spec.multi_label:
            raise UserError(f"saved_model.py: multi_label is a classification setting, not "
                            f"one of task {spec.task!r}")

    # --- in the graph ----------------------------------------------------------------------------

    def model_outputs(self, outputs: Any, seq_length: int) -> dict[str, tf.Tensor]:
        """The Keras model's outputs as float32 tensors, per-position ones padded back to T
        (`graph_ops.pad_positions`: trim_padding may have cut the positions)."""
        raise NotImplementedError

    def window_shapes(self) -> dict[str, list[int | None]]:
        """The shapes of `model_outputs` for a batch of windows, [None, ...] each."""
        raise NotImplementedError

    def decode(self, inputs: dict[str, tf.Tensor] | None, outputs: dict[str, tf.Tensor],
               chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        """The signature's outputs from `model_outputs`. `inputs`: the packed ids [B, T];
        `chars`: None in serve_ids, else each position's characters ("starts"/"ends"), the
        strings ("text", "text_b") and what `pack_pair` added."""
        raise NotImplementedError

    def pack_pair(self, a: tuple, b: tuple) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        """Packs segments a and b ((ids, starts, ends) ragged [B, (P)] each) into [B, T] ids and
        each position's characters; the default cuts as training does (longest first)."""
        packed = self.module.packer((a[0], b[0]))
        return packed, self.module.char_spans(packed, a[1:], b[1:])

    def merge_windows(self, outputs: dict[str, tf.Tensor], win: dict[str, tf.Tensor]
                      ) -> dict[str, tf.Tensor]:
        """long_input "windows": the text's outputs from its windows' (`outputs`, [W, ...]);
        `win`: "row"/"start"/"length" [W] (each window's text and pieces), "num_rows", and
        for single texts "ids"/"starts"/"ends" ragged [B, (P)], "lengths" [B], "text" [B]."""
        raise UserError(f"saved_model.py: long_input 'windows' is not served for task "
                        f"{self.spec.task!r}")

    @classmethod
    def tflite_outputs(cls, model: Any, spec: Any, inputs: dict[str, tf.Tensor],
                       outputs: Any, continuation: tf.Tensor) -> dict[str, tf.Tensor]:
        """The ids-in TFLite model's outputs from the Keras model's (no strings: TFLite has no
        string outputs); `continuation`: bool [V], the id is a "##" piece."""
        raise NotImplementedError

    def extra_signatures(self, serve_text: Any) -> dict[str, Any]:
        """{name: tf.function with an input_signature}: the SavedModel signatures this head
        adds beside serving_default and serve_ids; `serve_text` is serving_default's function.
        None by default."""
        return {}


class SingleOutputHead(ServingHead):
    """A head whose model returns one float tensor, served as it is under the name `output`
    (the regression score, the sentence embedding)."""

    output: ClassVar[str] = ""

    def model_outputs(self, outputs: Any, seq_length: int) -> dict[str, tf.Tensor]:
        return {self.output: tf.cast(outputs, tf.float32)}

    def decode(self, inputs: dict[str, tf.Tensor] | None, outputs: dict[str, tf.Tensor],
               chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        return {self.output: outputs[self.output]}

    @classmethod
    def tflite_outputs(cls, model: Any, spec: Any, inputs: dict[str, tf.Tensor],
                       outputs: Any, continuation: tf.Tensor) -> dict[str, tf.Tensor]:
        return {cls.output: tf.cast(outputs, tf.float32)}
