# bench/python/common.sh: what the Python benches share (sourced, after
# they set B, the bulwark binary, and PY, the interpreter).

# The status, retried while a loaded host's controller answers without the
# job (8 ranks importing torch on 2 cores is such a load).
status() {
  local s
  for _ in $(seq 1 50); do
    s=$($B status --json 2>/dev/null || true)
    [[ "$s" == *'"job"'* ]] && { echo "$s"; return; }
    sleep 0.2
  done
  echo '{}'
}
# The Python expression $1 over the JSON on stdin (d).
field() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }
# Waits up to $2 s for the Python expression $1 over status (d) to hold.
await() {
  local end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    [[ "$(status | field "$1" 2>/dev/null)" == True ]] && return 0
    sleep 0.2
  done
  echo "timed out waiting for: $1" >&2
  return 1
}
