#!/usr/bin/env bash
# bench/recovery_comparison: the same faults (machine-down, a hot update, a
# killed rank) under the conventional requeue and under bulwark's path, on
# the tiny model; prints per fault class the seconds from the fault to the
# first step and to regaining the progress it cost, the lost steps, and the
# ratios as ByteRobust defines them (warm standby vs requeue, hot update vs
# requeue), with no provisioning delay and with a modeled one added. Figures
# only. Raw samples in runs/bench-compare/result.json. Extra flags go to
# `bulwark bench-compare` (--repeat N, --provisioning-delay S, --persist-every N).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${BULWARK_DATA:-data/kjv}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  build/bin/bulwark-train prepare --corpus kjv --out "$DATA" --force
fi
exec build/bin/bulwark bench-compare --data "$DATA" "$@"
