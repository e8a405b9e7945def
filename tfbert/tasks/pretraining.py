"""The encoder and pretraining tasks: a bare BertEncoder, and BertPretrainer (masked LM + next
sentence prediction) trained by run_pretraining.py (`tfbert.training.pretrain`). Both export
their encoder (tfbert/tasks/pretraining_serving.py)."""

from tfbert.models.encoder import BertEncoder
from tfbert.models.pretrainer import BertPretrainer
from tfbert.tasks.base import Task
from tfbert.training.pretrain import run_pretraining
from tfbert.training.pretrain_config import PretrainConfig

TASKS = (Task("encoder", BertEncoder, export="encoder"),
         Task("pretraining", BertPretrainer, export="encoder", command="pretrain",
              config_class=PretrainConfig, run=run_pretraining))
