#!/usr/bin/env bash
# bench/ladder: the stop-time ladder on a mixed schedule of injected faults
# (a transient crash, a compute-fail machine, a release that cannot start,
# a silently corrupting machine) on a local cluster of 4 machines + 2
# standbys (tiny model, one rank per machine, ladder tests compute,device);
# prints the mechanism that resolved each fault, the time per rung, and the
# shares beside ByteRobust's. Figures only. Raw samples in
# runs/bench-ladder/result.json. Extra flags go to `bulwark bench-ladder`
# (--repeat N, --config small).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${BULWARK_DATA:-data/kjv}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  build/bin/bulwark-train prepare --corpus kjv --out "$DATA" --force
fi
exec build/bin/bulwark bench-ladder --data "$DATA" "$@"
