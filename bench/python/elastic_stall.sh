#!/usr/bin/env bash
# bench/python/elastic_stall.sh: the survivors' stall of a PyTorch script's
# elastic replicas (python/bulwark/elastic.py), at 2, 4 and 8 replicas, in
# one run on this host. The job is python/examples/gpt_train.py
# --elastic-replicas W on W machines (one rank each) and no standby; each
# fault is a `bulwark inject kill` of one rank, m02's then m03's (m01's at
# W = 2; a second crash on one machine within 10 minutes would evict it,
# another path): its spare takes the slot with a live peer's state, the
# others rejoin in their processes. Per kill it prints:
#   stall_s      the kill -> the first step a survivor completed in the next
#                generation (its regrouped event's wall clock): what the
#                survivors lost, the redone step's compute included;
#   regroup_s    a survivor's failed reduction -> its next completed step
#                (the regrouped event's since_end_ms);
#   step_s       the job's time per step over 5 s before the kill;
#   detect_s     the kill -> the controller's incident;
#   recover_s    the controller's decision -> the job's first step.
# Figures only, never an assertion. On 2 cores W ranks share the CPU, so
# step_s grows with W; stall_s less step_s is the regroup's own cost.
#
# usage: bench/python/elastic_stall.sh [WIDTHS] [KILLS]
#   WIDTHS  default "2 4 8";  KILLS per width, default 2
set -euo pipefail
cd "$(dirname "$0")/../.."
WIDTHS=${1:-2 4 8}
KILLS=${2:-2}
PY=${BULWARK_TORCH_PYTHON:-$PWD/.venv/bin/python}
OUT=${BULWARK_OUT:-runs/bench-python-elastic-stall}
rm -rf "$OUT" && mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
B=build/bin/bulwark
cleanup() { $B down >/dev/null 2>&1 || true; }
trap cleanup EXIT

# The status, retried while a loaded host's controller answers without the
# job (8 ranks importing torch on 2 cores is such a load).
source bench/python/common.sh  # the cwd is the repository root

printf '%-3s %-4s %-9s %-10s %-9s %-9s %s\n' W kill stall_s regroup_s step_s detect_s recover_s
for W in $WIDTHS; do
  export BULWARK_DIR="$OUT/cluster-$W"
  $B up --machines "$W" >/dev/null
  cat > "$OUT/job-$W.yaml" <<YAML
name: gpt
world_size: $W
recovery: {mode: elastic}
command: [$PY, $PWD/python/examples/gpt_train.py, --elastic-replicas, '$W', --steps, '100000000']
env: {OMP_NUM_THREADS: '1', PYTHONUNBUFFERED: '1'}
YAML
  $B submit "$OUT/job-$W.yaml" >/dev/null
  await "d['job']['last_step'] >= 20" 300
  for k in $(seq 1 "$KILLS"); do
    # The kill's machine has its spare set up first (the comparison is of
    # the regroup, not of a process start).
    m=$(printf 'm%02d' $((k % W + 1)))
    end=$((SECONDS + 180))
    until grep -q spare_ready "$BULWARK_DIR"/machines/$m/ranks/spare.log 2>/dev/null || ((SECONDS > end)); do sleep 0.2; done
    gen=$(status | field "d['job']['generation']")
    step0=$(status | field "d['job']['last_step']")
    await "d['job']['last_step'] >= $((step0 + 10))" 300
    a=$(status | field "d['job']['last_step']"); ta=$(date +%s.%N)
    sleep 5  # a window to count steps in, not a wait for a condition
    b=$(status | field "d['job']['last_step']"); tb=$(date +%s.%N)
    step_s=$("$PY" -c "print('%.3f' % (($tb - $ta) / max(1, $b - $a)))")
    t0=$(date +%s%3N)
    $B inject kill --machine "$m" >/dev/null
    await "d['job']['generation'] > $gen and d['job']['state'] == 'running'" 180
    await "d['job']['last_step'] > $((step0 + 12))" 180
    $B incidents --json > "$OUT/incidents-$W.json"
    "$PY" - "$OUT/incidents-$W.json" "$W" "$k" "$t0" "$BULWARK_DIR" "$((gen + 1))" "$step_s" <<'PYEOF'
import glob, json, sys
i = json.load(open(sys.argv[1]))[-1]
t0, gen = int(sys.argv[4]), int(sys.argv[6])
first = None  # the earliest survivor's first step of the next generation
for log in glob.glob(sys.argv[5] + "/machines/*/ranks/rank-*.log"):
    for line in open(log, errors="replace"):
        if line.startswith("{"):
            e = json.loads(line)
            if e.get("event") == "regrouped" and e.get("generation") == gen and (first is None or e["wall_ms"] < first["wall_ms"]):
                first = e
stall = (first["wall_ms"] - t0) / 1000.0 if first else float("nan")
regroup = first["since_end_ms"] / 1000.0 if first else float("nan")
print("%-3s %-4s %-9.3f %-10.3f %-9s %-9.3f %.3f" % (sys.argv[2], sys.argv[3], stall, regroup, sys.argv[7],
      i["detected_ms"] / 1000.0 - t0 / 1000.0, i.get("recover_s", -1)))
PYEOF
  done
  $B down >/dev/null
done
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
