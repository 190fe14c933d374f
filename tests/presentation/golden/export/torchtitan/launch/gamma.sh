#!/usr/bin/env bash
# planner export --format torchtitan: the hosts of domain gamma (instance tiny-3dc).
# Written for torchtitan 0.3.0: torchtitan==0.3.0.
# On each host below run:  MASTER_ADDR=<address of alpha-node0> bash launch/gamma.sh HOST [more arguments]
# Every host of every domain uses the same MASTER_ADDR and MASTER_PORT: torchrun node rank 0 runs on alpha-node0.
set -euo pipefail
SCRIPT=launch/gamma.sh
DOMAIN=gamma
MASTER_HOST=alpha-node0
HOSTS='gamma-node0 gamma-node1'
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${MASTER_ADDR:?set MASTER_ADDR to the address of $MASTER_HOST, where torchrun node rank 0 runs}"
MASTER_PORT="${MASTER_PORT:-29500}"
read -r -a TRAIN <<< "${TRAIN:--m torchtitan.train}"
ARGS=(
  --module "${TORCHTITAN_MODULE:?set TORCHTITAN_MODULE and TORCHTITAN_CONFIG to a torchtitan config_registry for this model (README.md)}"
  --config "${TORCHTITAN_CONFIG:?set TORCHTITAN_MODULE and TORCHTITAN_CONFIG to a torchtitan config_registry for this model (README.md)}"
  --training.local_batch_size 8
  --training.global_batch_size 16
  --training.seq_len 512
  --training.disable_cuda_graphs
  --parallelism.data_parallel_replicate_degree 1
  --parallelism.data_parallel_shard_degree 2
  --parallelism.fsdp_reshard_after_forward never
  --parallelism.tensor_parallel_degree 4
  --parallelism.context_parallel_degree 1
  --parallelism.pipeline_parallel_degree 4
  --parallelism.module_fqns_per_model_part tok_embeddings,layers.0,layers.1 layers.2,layers.3 layers.4,layers.5 layers.6,layers.7,norm,output
  --parallelism.pipeline_parallel_schedule GPipe
  --parallelism.pipeline_parallel_microbatch_size 1
)
# after your arguments: torchtitan takes no option after this subcommand
LAST=(
  activation_checkpoint:none
)
HOST="${1:?usage: $SCRIPT HOST [more arguments]; HOST is one of $HOSTS}"
shift
EXTRA=("$@")
run() {  # CUDA devices, torchrun node rank, processes
  CUDA_VISIBLE_DEVICES="$1" torchrun --nnodes 8 --node-rank "$2" --nproc-per-node "$3" \
    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "${TRAIN[@]}" "${ARGS[@]}" "${EXTRA[@]}" "${LAST[@]}" &
}
case "$HOST" in
  gamma-node0) run 0,1,2,3 6 4 ;;  # ranks 24-27
  gamma-node1) run 0,1,2,3 7 4 ;;  # ranks 28-31
  *) echo "$SCRIPT: $HOST is not a host of domain $DOMAIN ($HOSTS)" >&2; exit 2 ;;
esac
wait
