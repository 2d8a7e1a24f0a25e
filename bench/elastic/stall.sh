#!/usr/bin/env bash
# bench/elastic/stall.sh: what one lost replica costs the others in an
# elastic data-parallel job (recovery elastic, trainer/step/elastic.h). For each
# width R (default 2 4 8) a local cluster of R machines, one rank each,
# trains the tiny model with --elastic-replicas R; rank R-1 is SIGKILLed and
# the survivors' stall is printed: from the kill to the first step rank 0
# completes after it (that step's own compute included), with the
# controller's detection and recovery split and how the killed rank came
# back (its source of state). Then the last machine's device fails (no
# standby: the others go on at R-1) and `bulwark machine return` gives it
# back: the stall of the narrowing, the time from the return to full width
# (the returned machine sets up a spare of the job meanwhile), and how long
# rank 0 stood still for the growth (its last step before the change to
# its first after), and the narrowing's incident: the survivors' stall and
# how long the job trained narrower. Figures only, never an assertion.
# Usage: bench/elastic/stall.sh [R ...]   (BULWARK_UP_FLAGS goes to `bulwark up`;
# BULWARK_ELASTIC_COMM=gloo reduces over Gloo's mesh instead of the ring;
# BULWARK_SPLICE=0 grows by a yield of every rank instead of a splice)
set -euo pipefail
cd "$(dirname "$0")/../.."
WIDTHS=("${@:-2 4 8}")
[[ $# -eq 0 ]] && WIDTHS=(2 4 8)
DATA=${BULWARK_DATA:-data/kjv}
COMM=${BULWARK_ELASTIC_COMM:-ring}
OUT=${BULWARK_OUT:-runs/bench-elastic}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  build/bin/bulwark-train prepare --corpus kjv --out "$DATA" --force
fi
rm -rf "$OUT" && mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA=$(cd "$DATA" && pwd)
trap 'build/bin/bulwark down >/dev/null 2>&1 || true' EXIT

echo "host: $(nproc) cores, loadavg $(cut -d' ' -f1-3 /proc/loadavg); the replicas reduce over: $COMM"
for R in "${WIDTHS[@]}"; do
  export BULWARK_DIR="$OUT/r$R/cluster"
  mkdir -p "$OUT/r$R"
  cat > "$OUT/r$R/job.yaml" <<YAML
name: elastic
world_size: $R
recovery: {mode: elastic}
args: [--config, tiny, --data, $DATA, --steps, '100000000', --log-format, json, --eval-every, '0',
       --threads, '1', --dist-timeout, '10', --precision, fp32, --elastic-replicas, '$R', --micro-batches, '2', --memory-ckpt, 'on',
       --elastic-comm, $COMM]
env: {OMP_NUM_THREADS: '1', BULWARK_SPLICE: '${BULWARK_SPLICE:-1}'}
YAML
  build/bin/bulwark up --machines "$R" ${BULWARK_UP_FLAGS:-} >/dev/null
  build/bin/bulwark submit "$OUT/r$R/job.yaml" >/dev/null
  last=$(printf 'm%02d' "$R")
  # Training, and the last machine's spare set up (it takes the rank back).
  for _ in $(seq 1 240); do
    step=$(build/bin/bulwark status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["last_step"])')
    [[ "$step" -ge 50 && -s "$BULWARK_DIR/machines/$last/ranks/spare.log" ]] && break
    sleep 0.5
  done
  # The kill is a SIGKILL sent here to the rank's process (the pid of its
  # newest adopt line), timed the instant before: `bulwark inject kill`
  # would time its own start-up and RPCs (0.2-0.5 s on this host) as
  # part of the survivors' stall, while they were still training.
  kill_ms=$(python3 - "$BULWARK_DIR/machines/$last/ranks/rank-$((R - 1)).log" <<'PY'
import json, os, signal, sys, time
pid = None
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if isinstance(j, dict) and j.get("event") == "adopt" and j.get("pid"):
        pid = j["pid"]
t = int(time.time() * 1000)
os.kill(pid, signal.SIGKILL)
print(t)
PY
)
  # Wait for 20 steps after the kill.
  for _ in $(seq 1 240); do
    n=$(python3 - "$BULWARK_DIR/machines/m01/ranks/rank-0.log" "$kill_ms" <<'PY'
import json, sys
after = 0
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if j.get("event") == "step" and j.get("wall_ms", 0) > int(sys.argv[2]):
        after += 1
print(after)
PY
)
    [[ "$n" -ge 20 ]] && break
    sleep 0.5
  done
  build/bin/bulwark incidents --json > "$OUT/r$R/incidents.json"
  python3 - "$R" "$BULWARK_DIR/machines" "$kill_ms" "$OUT/r$R/incidents.json" "$last" <<'PY'
import json, sys
R, machines, kill_ms, inc_path, last = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def events(path):
    out = []
    for line in open(path):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if isinstance(j, dict):
            out.append(j)
    return out
ev = events(f"{machines}/m01/ranks/rank-0.log")
# The generation after the kill starts at rank 0's newest restore line.
i = max(k for k, e in enumerate(ev) if e.get("event") == "restore")
steps = [e for e in ev[i:] if e.get("event") == "step"]
before = [e["step_ms"] for e in ev[:i] if e.get("event") == "step"][-20:]
first = steps[0]
inc = json.load(open(inc_path))[-1]
stall = (first["wall_ms"] - kill_ms) / 1000.0
restore = ev[i]
print(f"R={R}: survivors' stall {stall:.3f} s (kill -> next completed step; step before {sorted(before)[len(before)//2]:.1f} ms), "
      f"detect {(inc['detected_ms'] - kill_ms) / 1000.0:.3f} s (the agent's), recover {inc.get('recover_s', -1):.3f} s, "
      f"rank 0's state: {restore.get('source')}, sync {restore.get('ms', 0):.1f} ms; "
      f"rank {R-1} back from a {'live peer' if 'from live rank' in open(f'{machines}/{last}/ranks/rank-{R-1}.log').read() else 'restore'}")
PY
  # Narrower, then back: device-fail of the last machine, then its return.
  gen=$(build/bin/bulwark status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["generation"])')
  fail_ms=$(python3 -c 'import time; print(int(time.time()*1000))')
  build/bin/bulwark inject device-fail --machine "$last" >/dev/null
  wait_gen() {  # generation > $1 on $2 machines, 10 steps into it
    for _ in $(seq 1 240); do
      build/bin/bulwark status --json | python3 -c '
import json, sys
j = json.load(sys.stdin)["job"]
sys.exit(0 if j["generation"] > int(sys.argv[1]) and len(j["placement"]) == int(sys.argv[2]) and j["state"] == "running" else 1)' "$1" "$2" && break
      sleep 0.5
    done
    sleep 2
  }
  wait_gen "$gen" $((R - 1))
  gen=$(build/bin/bulwark status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["generation"])')
  ret_ms=$(python3 -c 'import time; print(int(time.time()*1000))')
  build/bin/bulwark machine return --machine "$last" >/dev/null
  wait_gen "$gen" "$R"
  # The narrowing's incident, as `bulwark incidents` prints it.
  build/bin/bulwark incidents | grep -E '^    stall ' | tail -1 | sed "s/^ */R=$R: incident: /"
  python3 - "$R" "$BULWARK_DIR/machines" "$fail_ms" "$ret_ms" "$last" <<'PY'
import json, sys
R, machines, fail_ms, ret_ms, last = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ev = []
for line in open(f"{machines}/m01/ranks/rank-0.log"):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if isinstance(j, dict):
        ev.append(j)
restores = [k for k, e in enumerate(ev) if e.get("event") == "restore"]
def first_step_after(k):
    return next(e for e in ev[k:] if e.get("event") == "step")
def last_step_before(k):
    return [e for e in ev[:k] if e.get("event") == "step"][-1]
narrow, grow = restores[-2], restores[-1]
agent = open(f"{machines}/{last}/agent.log").read()
adopted = [e for e in ev[:grow] if e.get("event") == "adopt"]
how = "spliced" if adopted and adopted[-1].get("path") == "splice" else "yielded"
print(f"R={R}: device-fail -> {R-1} of {R}: stall {(first_step_after(narrow)['wall_ms'] - fail_ms) / 1000.0:.3f} s; "
      f"return -> {R} of {R}: {(first_step_after(grow)['wall_ms'] - ret_ms) / 1000.0:.3f} s, "
      f"rank 0 stood still {(first_step_after(grow)['wall_ms'] - last_step_before(grow)['wall_ms']) / 1000.0:.3f} s "
      f"between steps, of which the first step after took {first_step_after(grow)['step_ms'] / 1000.0:.3f} s and the "
      f"last before {last_step_before(grow)['step_ms'] / 1000.0:.3f} s "
      f"({how}; "
      f"its state: {ev[grow].get('source')}); the returned machine's rank from a "
      f"{'spare' if ':prespawned' in agent.split('warm: ')[-1] else 'cold start'}")
PY
  build/bin/bulwark down >/dev/null
done
