#!/usr/bin/env bash
# The main job (`make demo`): prepare the King James Bible as the default
# corpus if it is missing, then `bulwark demo`: a local cluster of 4 machines
# and 2 standbys trains the small model while every explicit fault class is
# injected, with a live status line, the incident table and ETTR ledger at
# the end, and a report in $OUT (report.html with a timeline, report.md,
# report.json). Exits non-zero, with the reason, if a recovery does not
# happen; the cluster is brought down either way.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=build/bin
DATA=${BULWARK_DATA:-data/kjv}
OUT=${BULWARK_RUN:-runs/demo}

if [[ ! -f "$DATA/tokenizer.model" ]]; then
  echo "== preparing the corpus into $DATA"
  "$BIN/bulwark-train" prepare --corpus kjv --out "$DATA" --force
fi

exec "$BIN/bulwark" demo --data "$DATA" --out "$OUT" "$@"
