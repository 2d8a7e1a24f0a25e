#!/usr/bin/env bash
# bench/implicit: every implicit fault class (hang in a collective, hang in
# compute, NaN, loss spike, a 2x slow machine) injected 3 times into a local
# cluster of 4 machines + 2 standbys (tiny model, one rank per machine);
# prints the median detect, localize and recover seconds and lost steps per
# class, and whether the injected machine was the one evicted. Figures only.
# Raw samples in runs/bench-implicit/result.json. Extra flags go to `bulwark
# bench-implicit` (--repeat N, --config small). The false-positive run is
# bench/implicit/false_positives.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${BULWARK_DATA:-data/kjv}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  build/bin/bulwark-train prepare --corpus kjv --out "$DATA" --force
fi
exec build/bin/bulwark bench-implicit --data "$DATA" "$@"
