#!/usr/bin/env bash
# bench/python/warm_restart.sh: what a restart costs a PyTorch job, warm
# (bulwark.run: the survivors keep their process, the killed rank's slot
# goes to a spare the agent started ahead of need) against cold (a new
# process per rank per restart: a new interpreter, import torch, the model
# built again), in one run on this host. The job is python/examples/
# gpt_train.py, DDP over Gloo, 3 machines and 1 standby, one rank each;
# each restart is a `bulwark inject kill` of one rank, on m01, m02, m03 in
# turn (a second crash on one machine within 10 minutes evicts it, which
# is another path). Per kill it prints
# the incident's detect time (injection -> controller) and recover time
# (restart decision -> first step), and the wall time from the kill to the
# job's next step as status shows it. Figures only, never an assertion.
#
# usage: bench/python/warm_restart.sh [KILLS] [MODES]
#   KILLS  default 3 per mode, at most 3
#   MODES  default "cold warm"
set -euo pipefail
cd "$(dirname "$0")/../.."
KILLS=${1:-3}
MODES=${2:-cold warm}
PY=${BULWARK_TORCH_PYTHON:-$PWD/.venv/bin/python}
OUT=${BULWARK_OUT:-runs/bench-python-warm-restart}
rm -rf "$OUT" && mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
B=build/bin/bulwark
cleanup() { $B down >/dev/null 2>&1 || true; }
trap cleanup EXIT

source bench/python/common.sh  # the cwd is the repository root

printf '%-5s %-4s %-10s %-10s %-12s %s\n' mode kill detect_s recover_s kill_to_step path
for mode in $MODES; do
  export BULWARK_DIR="$OUT/cluster-$mode"
  $B up --machines 3 --standby 1 >/dev/null
  flag=""
  [[ "$mode" == cold ]] && flag=", --cold"
  cat > "$OUT/job-$mode.yaml" <<YAML
name: gpt
world_size: 3
command: [$PY, $PWD/python/examples/gpt_train.py, --steps, '100000000'$flag]
env: {PYTHONPATH: $PWD/python, OMP_NUM_THREADS: '1', PYTHONUNBUFFERED: '1'}
YAML
  $B submit "$OUT/job-$mode.yaml" >/dev/null
  await "d['job']['last_step'] >= 20" 180
  for k in $(seq 1 "$KILLS"); do
    m=m0$k
    if [[ "$mode" == warm ]]; then
      # A kill before the spare is up finds none: wait for it (the
      # comparison is of the path, not of the spare's start-up).
      end=$((SECONDS + 120))
      until grep -q spare_ready "$BULWARK_DIR"/machines/$m/ranks/spare.log 2>/dev/null || ((SECONDS > end)); do sleep 0.2; done
    fi
    gen=$(status | field "d['job']['generation']")
    inc=$(status | field "d['job']['incidents']")
    t0=$(date +%s.%N)
    $B inject kill --machine $m >/dev/null
    step0=$(status | field "d['job']['last_step']")
    await "d['job']['generation'] > $gen and d['job']['state'] == 'running' and d['job']['last_step'] > $step0" 180
    t1=$(date +%s.%N)
    $B incidents --json > "$OUT/incidents-$mode.json"
    "$PY" - "$OUT/incidents-$mode.json" "$mode" "$k" "$t0" "$t1" "$BULWARK_DIR" "$((gen + 1))" "$m" <<'PYEOF'
import glob, json, re, sys
incs = json.load(open(sys.argv[1]))
i = incs[-1]
t0, t1 = float(sys.argv[4]), float(sys.argv[5])
path = "?"
for line in open(glob.glob(sys.argv[6] + "/machines/" + sys.argv[8] + "/ranks/rank-*.log")[0], errors="replace"):
    m = re.match(r"bulwark-agent: starting rank \d+ of generation (\d+) \((\w+)", line)
    if m and int(m.group(1)) >= int(sys.argv[7]):
        path = m.group(2)
print("%-5s %-4s %-10.3f %-10.3f %-12.3f %s" % (sys.argv[2], sys.argv[3], i["detected_ms"] / 1000.0 - t0,
      i.get("recover_s", -1), t1 - t0, path))
PYEOF
    await "d['job']['last_step'] >= $((step0 + 20))" 180
  done
  $B down >/dev/null
done
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
