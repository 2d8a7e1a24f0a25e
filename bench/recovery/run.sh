#!/usr/bin/env bash
# bench/recovery: every explicit fault class injected 3 times into a local
# cluster (2 machines + 4 standbys, tiny model, one rank per machine); prints
# the median detect and recover seconds per class, where the recovery seconds
# go, and the run's ETTR. Figures only, never a timing assertion. Raw samples
# in runs/bench-recovery/result.json. Extra flags go to `bulwark
# bench-recovery` (--repeat N, --config small).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${BULWARK_DATA:-data/kjv}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  build/bin/bulwark-train prepare --corpus kjv --out "$DATA" --force
fi
exec build/bin/bulwark bench-recovery --data "$DATA" "$@"
