#!/usr/bin/env bash
# The main job (`make demo`): prepare the King James Bible as the default
# corpus, then train the small model for a few minutes with a live progress
# line, periodic validation and checkpoints, and a summary at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=build/bin
DATA=${BULWARK_DATA:-data/kjv}
RUN=${BULWARK_RUN:-runs/demo}
STEPS=${BULWARK_DEMO_STEPS:-500}

if [[ ! -f "$DATA/tokenizer.model" ]]; then
  echo "== preparing the corpus into $DATA"
  "$BIN/bulwark-train" prepare --corpus kjv --out "$DATA" --force
fi

echo "== training the small model for $STEPS steps (checkpoints in $RUN/ckpt)"
rm -rf "$RUN"
mkdir -p "$RUN"
"$BIN/bulwark-train" --config small --data "$DATA" --steps "$STEPS" --eval-every 100 \
  --ckpt-dir "$RUN/ckpt" --ckpt-every 100 | tee "$RUN/done.json"
echo "== done; the last line above is the trainer's machine-readable summary ($RUN/done.json)"
