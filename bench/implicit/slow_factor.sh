#!/usr/bin/env bash
# bench/implicit/slow_factor.sh: how strong the emulated slow machine is.
# For each injected factor F, each job kind and each host load, a local
# cluster of 4 machines trains; one machine gets `inject slow --factor F`;
# the fail-slow incident's measured factor ("m04 computes N x the others")
# is printed beside F. Figures only, never an assertion (the cluster tests
# check >= 0.8 F). Policy: 3 rounds of 5 s, to keep each run short.
#
# usage: bench/implicit/slow_factor.sh [FACTORS] [JOBS] [LOADS]
#   FACTORS  default "2 1.5"
#   JOBS     default "train ddp": bulwark-train's tiny model, a PyTorch DDP
#            script over Gloo (the project's .venv/bin/python)
#   LOADS    default "quiet busy": busy runs one `while :; do :; done` beside
set -euo pipefail
cd "$(dirname "$0")/../.."
FACTORS=${1:-2 1.5}
JOBS=${2:-train ddp}
LOADS=${3:-quiet busy}
DATA=${BULWARK_DATA:-data/kjv}
PY=${BULWARK_TORCH_PYTHON:-$PWD/.venv/bin/python}
OUT=${BULWARK_OUT:-runs/bench-slow-factor}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  build/bin/bulwark-train prepare --corpus kjv --out "$DATA" --force
fi
rm -rf "$OUT" && mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA=$(cd "$DATA" && pwd)
busy_pid=""
cleanup() {
  [[ -n "$busy_pid" ]] && kill "$busy_pid" 2>/dev/null || true
  build/bin/bulwark down >/dev/null 2>&1 || true
}
trap cleanup EXIT

cat > "$OUT/ddp.py" <<'PYEOF'
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
import bulwark
torch.set_num_threads(1)
torch.manual_seed(0)
dist.init_process_group("gloo")
model = DDP(nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
step = 0
while True:
    step += 1
    loss = model(torch.randn(256, 128)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    bulwark.step(step, loss=loss.item())
PYEOF
printf 'slow_round: 5\nslow_rounds: 3\n' > "$OUT/policy.yaml"

printf '%-6s %-6s %-6s %-10s %s\n' factor job load measured incident
for load in $LOADS; do
  if [[ "$load" == busy ]]; then
    ( while :; do :; done ) &
    busy_pid=$!
  fi
  for job in $JOBS; do
    for f in $FACTORS; do
      export BULWARK_DIR="$OUT/cluster-$load-$job-$f"
      build/bin/bulwark up --machines 4 --standby 1 --policy "$OUT/policy.yaml" >/dev/null
      if [[ "$job" == train ]]; then
        cat > "$OUT/job.yaml" <<YAML
name: slow
world_size: 4
args: [--config, tiny, --data, $DATA, --steps, '100000000', --log-format, json, --threads, '1', --dist-timeout, '60']
env: {OMP_NUM_THREADS: '1'}
YAML
      else
        cat > "$OUT/job.yaml" <<YAML
name: slow
world_size: 4
command: [$PY, $OUT/ddp.py]
env: {PYTHONPATH: $PWD/python, OMP_NUM_THREADS: '1', PYTHONUNBUFFERED: '1'}
YAML
      fi
      build/bin/bulwark submit "$OUT/job.yaml" >/dev/null
      for _ in $(seq 240); do
        step=$(build/bin/bulwark status --json | python3 -c 'import json,sys; print((json.load(sys.stdin).get("job") or {}).get("last_step", 0))')
        (( step >= 30 )) && break
        sleep 0.5
      done
      build/bin/bulwark inject slow --machine m04 --factor "$f" >/dev/null
      cause=""
      for _ in $(seq 180); do
        cause=$(build/bin/bulwark incidents --json | python3 -c 'import json,sys
for i in json.load(sys.stdin):
    if "fail-slow" in i.get("cause", ""): print(i["cause"]); break')
        [[ -n "$cause" ]] && break
        sleep 1
      done
      measured=$(sed -n 's/.* computes \([0-9.]*\)x.*/\1/p' <<<"$cause" | head -1)
      printf '%-6s %-6s %-6s %-10s %s\n' "$f" "$job" "$load" "${measured:-none}x" "${cause:-no fail-slow incident in 180 s}"
      build/bin/bulwark down >/dev/null 2>&1 || true
    done
  done
  if [[ -n "$busy_pid" ]]; then kill "$busy_pid"; busy_pid=""; fi
done
echo "host: $(nproc) cores, loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
