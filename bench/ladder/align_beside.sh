#!/usr/bin/env bash
# bench/ladder/align_beside.sh: what the periodic bitwise check costs a
# training job. A local cluster (shared stack) of 4 machines trains the tiny
# model for WINDOW seconds after its 20th step, once with the check off and
# once with it every EVERY seconds; each run prints the steps trained in the
# window, the checks run and the restarts (generations) they cost. Each
# BULWARK_BIN given (a build's bin directory) runs the same schedule, so a
# build whose check stops the job compares with one whose check runs beside
# the ranks in one run:
#   WINDOW=90 EVERY=10 bash bench/ladder/align_beside.sh build/bin /old/build/bin
# Figures only.
set -euo pipefail
cd "$(dirname "$0")/../.."
BINS=("${@:-build/bin}")
WINDOW=${WINDOW:-90}
EVERY=${EVERY:-10}
DATA=${BULWARK_DATA:-data/kjv}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  "${BINS[0]}/bulwark-train" prepare --corpus kjv --out "$DATA" --force --quiet
fi
DATA=$(realpath "$DATA")
field() { python3 -c "import json,sys; j=json.load(sys.stdin)['job']; print($1)"; }
for bin in "${BINS[@]}"; do
  for every in 0 "$EVERY"; do
    dir=$(mktemp -d /tmp/bulwark-align.XXXXXX)
    b="$bin/bulwark"
    BULWARK_NETNS=off "$b" up --dir "$dir/c" --machines 4 --standby 1 --no-netns --ladder-align-every "$every" >/dev/null
    cat > "$dir/job.yaml" <<YAML
name: align
world_size: 4
args: [--config, tiny, --data, $DATA, --steps, '1000000', --log-format, json, --threads, '1', --dist-timeout, '30']
env: {OMP_NUM_THREADS: '1'}
YAML
    "$b" submit --dir "$dir/c" "$dir/job.yaml" >/dev/null
    until [[ $("$b" status --dir "$dir/c" --json | field 'j["last_step"] >= 20') == True ]]; do sleep 1; done
    read -r step0 gen0 < <("$b" status --dir "$dir/c" --json | field 'j["last_step"], j["generation"]')
    sleep "$WINDOW"
    read -r step1 gen1 < <("$b" status --dir "$dir/c" --json | field 'j["last_step"], j["generation"]')
    # Checks: the status's count where the build has one, else the incidents the check opened.
    checks=$("$b" status --dir "$dir/c" --json | field 'j.get("align_check", {}).get("checks", -1)')
    if [[ "$checks" == -1 ]]; then
      checks=$("$b" incidents --dir "$dir/c" --json |
        python3 -c 'import json,sys; print(sum("periodic bitwise check" in i["cause"] for i in json.load(sys.stdin)))')
    fi
    printf '%-28s every %3s s: %5d steps in %d s (%.2f/s), %2d check(s), %2d restart(s)\n' "$bin" "$every" \
      $((step1 - step0)) "$WINDOW" "$(python3 -c "print(($step1 - $step0) / $WINDOW)")" "$checks" $((gen1 - gen0))
    "$b" down --dir "$dir/c" >/dev/null || true
    rm -rf "$dir"
  done
done
