"""The plan's pipeline for DeepSpeed (planner export --format deepspeed, instance tiny-3dc),
written for DeepSpeed 0.19.8 (deepspeed==0.19.8).

DeepSpeed's PipelineModule partitions by "parameters", "uniform" or "type:REGEX"
(deepspeed/runtime/pipe/module.py, _partition_layers); none gives a chosen split,
so PlannedPipelineModule takes the plan's stage bounds PARTS instead.  Give it one
layer per planner unit, in order:
       0  embed
       1  block0
       2  block1
       3  block2
       4  block3
       5  block4
       6  block5
       7  block6
       8  block7
       9  head
"""

from deepspeed.pipe import PipelineModule
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

STAGES = 4
REPLICAS = 2
TENSOR_PARALLEL = 4
# stage j holds layers PARTS[j] .. PARTS[j + 1] - 1
PARTS = [0, 3, 5, 7, 10]
ACTIVATION_CHECKPOINT_INTERVAL = 0


def topology():
    """Ranks in the plan's order: axes pipe, data, model (model fastest)."""
    return PipeModelDataParallelTopology(num_pp=STAGES, num_mp=TENSOR_PARALLEL, num_dp=REPLICAS)


class PlannedPipelineModule(PipelineModule):
    """PipelineModule(layers, topology=topology(), loss_fn=..., activation_checkpoint_interval=...)
    with the plan's stages."""

    def _partition_layers(self, method="uniform"):
        if len(self._layer_specs) != PARTS[-1]:
            raise ValueError(f"{len(self._layer_specs)} layers given; the plan has {PARTS[-1]} units")
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self.parts = list(PARTS)
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])
