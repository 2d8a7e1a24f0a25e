#!/usr/bin/env bash
# bench/trainer_throughput: bulwark-train against the same model in PyTorch
# for Python, measured in one run. See run.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${BULWARK_DATA:-data/kjv}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  build/bin/bulwark-train prepare --corpus kjv --out "$DATA" --force
fi
exec /usr/bin/python3 bench/trainer_throughput/run.py --data "$DATA" "$@"
