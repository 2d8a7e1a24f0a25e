#!/usr/bin/env bash
# bench/implicit/false_positives.sh: the implicit-fault detectors' false
# positive check. A 4-machine local cluster (+2 standbys) trains the tiny
# model with no fault injected for MINUTES (default 30) while the host is
# loaded by LOAD (default: compiling bulwark's libtorch targets from scratch
# in a loop at -j2, on this 2-core host). It then prints every incident and
# eviction; the expected figure is zero of each. Figures only, never an
# assertion. Usage: bench/implicit/false_positives.sh [MINUTES] [--no-load]
# BULWARK_UP_FLAGS goes to `bulwark up`: --netns runs every machine in its
# own network namespace, with fencing (docs/control-plane.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
MINUTES=${1:-30}
DATA=${BULWARK_DATA:-data/kjv}
OUT=${BULWARK_OUT:-runs/bench-false-positives}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  build/bin/bulwark-train prepare --corpus kjv --out "$DATA" --force
fi
rm -rf "$OUT" && mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA=$(cd "$DATA" && pwd)
export BULWARK_DIR="$OUT/cluster"

load_pid=""
cleanup() {
  [[ -n "$load_pid" ]] && kill -- -"$load_pid" 2>/dev/null || true
  build/bin/bulwark down >/dev/null 2>&1 || true
}
trap cleanup EXIT

cat > "$OUT/job.yaml" <<YAML
name: fault-free
world_size: 4
args: [--config, tiny, --data, $DATA, --steps, '100000000', --log-format, json, --eval-every, '500',
       --ckpt-dir, $OUT/ckpt, --ckpt-every, '200', --resume, --threads, '1', --dist-timeout, '60']
env: {OMP_NUM_THREADS: '1'}
YAML
build/bin/bulwark up --machines 4 --standby 2 ${BULWARK_UP_FLAGS:-}
build/bin/bulwark submit "$OUT/job.yaml"

if [[ "${2:-}" != "--no-load" ]]; then
  # The load: what a developer's machine does all day, a C++ build.
  setsid bash -c "while true; do rm -rf '$OUT/load-build'; cmake -S . -B '$OUT/load-build' -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null 2>&1; cmake --build '$OUT/load-build' -j2 --target bulwark_torch bulwark >/dev/null 2>&1; done" &
  load_pid=$!
  echo "load: compiling bulwark_torch and bulwark in a loop at -j2 (pid $load_pid)"
fi

start=$(date +%s)
end=$((start + MINUTES * 60))
while (( $(date +%s) < end )); do
  sleep 60
  line=$(build/bin/bulwark status 2>&1 | grep -v "^metrics at" | head -1 || true)
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "$(( ($(date +%s) - start) / 60 )) min: $line; loadavg $load"
done

build/bin/bulwark status --json > "$OUT/status.json"
build/bin/bulwark incidents --json > "$OUT/incidents.json"
build/bin/bulwark ledger > "$OUT/ledger.txt"
python3 - "$OUT" "$MINUTES" <<'PY'
import json, sys
out, minutes = sys.argv[1], sys.argv[2]
st = json.load(open(out + "/status.json"))
inc = json.load(open(out + "/incidents.json"))
evicted = [m["id"] for m in st["machines"] if m["state"] == "evicted"]
print(f"fault-free run of {minutes} min: last step {st['job']['last_step']}, "
      f"{len(inc)} incident(s), {len(evicted)} machine(s) evicted {evicted}")
for i in inc:
    print("  " + i["summary"])
print("job-wide notes:", st["job"].get("notes", []))
d = st["job"].get("detectors", {})
print(f"fail-slow: the worst machine of any round that flagged nobody was {d.get('slow_max_unflagged_ratio', 0):.2f}x "
      f"its peers (threshold: the policy's slow_ratio); the highest median of a machine's last 30 rounds "
      f"{d.get('slow_max_unflagged_long_ratio', 0):.2f}x (threshold: slow_long_ratio)")
PY
cat "$OUT/ledger.txt"
