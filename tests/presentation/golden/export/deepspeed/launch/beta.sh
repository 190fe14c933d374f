#!/usr/bin/env bash
# planner export --format deepspeed: the hosts of domain beta (instance tiny-3dc).
# Written for DeepSpeed 0.19.8: deepspeed==0.19.8.
# On each host below run:  MASTER_ADDR=<address of alpha-node0> bash launch/beta.sh HOST [more arguments]
# Every host of every domain uses the same MASTER_ADDR and MASTER_PORT: torchrun node rank 0 runs on alpha-node0.
set -euo pipefail
SCRIPT=launch/beta.sh
DOMAIN=beta
MASTER_HOST=alpha-node0
HOSTS='beta-node0 beta-node1'
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${MASTER_ADDR:?set MASTER_ADDR to the address of $MASTER_HOST, where torchrun node rank 0 runs}"
MASTER_PORT="${MASTER_PORT:-29500}"
read -r -a TRAIN <<< "${TRAIN:-train.py}"
ARGS=(
  --deepspeed
  --deepspeed_config "$HERE/ds_config.json"
)
HOST="${1:?usage: $SCRIPT HOST [more arguments]; HOST is one of $HOSTS}"
shift
EXTRA=("$@")
run() {  # CUDA devices, torchrun node rank, processes
  CUDA_VISIBLE_DEVICES="$1" torchrun --nnodes 8 --node-rank "$2" --nproc-per-node "$3" \
    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "${TRAIN[@]}" "${ARGS[@]}" "${EXTRA[@]}" &
}
case "$HOST" in
  beta-node0) run 0,1,2,3 4 4 ;;  # ranks 16-19
  beta-node1) run 0,1,2,3 5 4 ;;  # ranks 20-23
  *) echo "$SCRIPT: $HOST is not a host of domain $DOMAIN ($HOSTS)" >&2; exit 2 ;;
esac
wait
