#!/usr/bin/env bash
# bench/checkpoint_overhead: the small model on a local cluster (2 ranks, one
# per machine) with every-step in-memory checkpoints off and on, interleaved
# in one run: tokens/s, median step time, median blocking per step. Then the
# restore time and lost steps from each source: a killed rank (memory), a
# dead machine (backup peer, onto a standby), a machine and its backup peer
# dead together (durable storage). Figures only. Raw samples in
# runs/bench-checkpoint/result.json. Extra flags go to `bulwark
# bench-checkpoint` (--rounds N, --steps N, --config tiny, --persist-every N,
# --shard-optimizer: ZeRO-1, whose backups cross the network).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${BULWARK_DATA:-data/kjv}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  build/bin/bulwark-train prepare --corpus kjv --out "$DATA" --force
fi
exec build/bin/bulwark bench-checkpoint --data "$DATA" "$@"
