#!/usr/bin/env bash
# POET, pipeline stages and elastic replicas on one device, with
# deterministic kernels (BULWARK_CUDA_DETERMINISTIC=1), each checked by the
# property its CPU tests hold:
#   poet      the same seed gives the same checksum, and a run stopped
#             between two merges and resumed from disk ends on the
#             uninterrupted run's checksum;
#   pipeline  two stages on two ranks (sharing the device) train, agree on
#             the checksum, and two runs give the same one;
#   elastic   two replicas' micro-batches computed on two ranks or on one
#             end on the same bits (the exact reduction), with the
#             optimizer state whole or sharded (ZeRO-1).
# Registered with the CTest label `gpu` beside trainer_device_test.sh
# (tests/gpu/CMakeLists.txt); runs on the CPU too (DEVICE=cpu), which is how
# it was checked on a machine without a GPU.
#
#   tests/gpu/trainer_layouts_test.sh BULWARK_TRAIN DATA_DIR [DEVICE]
set -euo pipefail

train=${1:?usage: $0 BULWARK_TRAIN DATA_DIR [DEVICE]}
data=${2:?usage: $0 BULWARK_TRAIN DATA_DIR [DEVICE]}
device=${3:-cuda}
[[ -x $train ]] || { echo "trainer_layouts_test: $train is not an executable" >&2; exit 1; }
[[ -d $data ]] || { echo "trainer_layouts_test: no data in $data" >&2; exit 1; }
export BULWARK_CUDA_DETERMINISTIC=1

work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
failures=0
common=(--config tiny --data "$data" --device "$device" --seed 7 --threads 1 --eval-every 0 --memory-ckpt off
        --log-format json --precision fp32)

fail() {
  echo "FAIL $*" >&2
  failures=$((failures + 1))
}
checksum() { grep '"event":"done"' "$1" | sed -n 's/.*"param_checksum":"\([0-9a-f]*\)".*/\1/p'; }
expect_eq() {  # WHAT A B
  if [[ -n $2 && $2 == "$3" ]]; then echo "ok   $1 ($2)"; else fail "$1: '$2' != '$3'"; fi
}

# launch NAME RANKS ARGS...: RANKS processes under the torchrun variables,
# rank 0 choosing the port (MASTER_PORT=0: it prints the rendezvous line);
# rank r's stdout in $work/NAME.r.out. Fails when a rank exits non-zero or
# rank 0 names no port within 60 s.
launch() {
  local name=$1 ranks=$2
  shift 2
  local env=(RANK=0 WORLD_SIZE="$ranks" LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=0)
  if ((ranks == 1)); then env=(); fi
  env "${env[@]}" "$train" "${common[@]}" "$@" >"$work/$name.0.out" 2>"$work/$name.0.err" &
  pids=($!)
  if ((ranks > 1)); then
    local port="" deadline=$((SECONDS + 60))
    while [[ -z $port ]] && ((SECONDS < deadline)); do
      port=$(sed -n 's/.*"event":"rendezvous","port":\([0-9]*\).*/\1/p' "$work/$name.0.out" | head -n 1)
      [[ -n $port ]] || sleep 0.1
    done
    if [[ -z $port ]]; then
      fail "$name: rank 0 named no rendezvous port in 60 s"
      tail -n 5 "$work/$name.0.err" >&2
      return 1
    fi
    for ((r = 1; r < ranks; r++)); do
      RANK=$r WORLD_SIZE=$ranks LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$train" "${common[@]}" "$@" >"$work/$name.$r.out" 2>"$work/$name.$r.err" &
      pids+=($!)
    done
  fi
  local r=0 ok=0
  for pid in "${pids[@]}"; do
    if ! wait "$pid"; then
      fail "$name: rank $r exited non-zero:"
      tail -n 5 "$work/$name.$r.err" >&2
      ok=1
    fi
    r=$((r + 1))
  done
  pids=()
  return $ok
}

# agreed NAME RANKS: the checksum every rank printed, or empty (and a
# failure) when they differ.
agreed() {
  local sum
  sum=$(checksum "$work/$1.0.out")
  for ((r = 1; r < $2; r++)); do
    if [[ $(checksum "$work/$1.$r.out") != "$sum" ]]; then
      fail "$1: rank $r's checksum differs from rank 0's"
      return
    fi
  done
  echo "$sum"
}

# ---- POET: merges every 4 steps; the stop at 6 lies between two.
poet=(--optimizer poet --poet-merge-every 4 --steps 12)
if launch poet-a 1 "${poet[@]}" && launch poet-b 1 "${poet[@]}"; then
  expect_eq "poet: same seed, same checksum" "$(agreed poet-a 1)" "$(agreed poet-b 1)"
  ckpt=(--ckpt-dir "$work/ckpt-poet" --ckpt-every 3)
  if launch poet-stop 1 "${poet[@]}" "${ckpt[@]}" --stop-at 6 && launch poet-resume 1 "${poet[@]}" "${ckpt[@]}" --resume; then
    grep -q '"start_step":6' "$work/poet-resume.0.out" || fail "poet: the resumed run did not start from step 6"
    expect_eq "poet: resume between merges is bitwise" "$(agreed poet-a 1)" "$(agreed poet-resume 1)"
  fi
fi

# ---- Pipeline: two stages, two micro-batches; in bf16 too (what crosses
# between the stages must stay the type the receiving buffer has).
for precision in fp32 bf16; do
  pipe=(--pp 2 --micro-batches 2 --batch-size 4 --steps 8 --precision "$precision")
  if launch "pipe-$precision-a" 2 "${pipe[@]}" && launch "pipe-$precision-b" 2 "${pipe[@]}"; then
    expect_eq "pipeline ($precision): two stages, same seed, same checksum" \
      "$(agreed "pipe-$precision-a" 2)" "$(agreed "pipe-$precision-b" 2)"
  fi
done

# ---- Elastic: two replicas of two micro-batches, on two ranks and on one.
for zero in off on; do
  el=(--elastic-replicas 2 --micro-batches 2 --batch-size 4 --steps 8)
  [[ $zero == on ]] && el+=(--shard-optimizer)
  if launch "elastic-$zero-2" 2 "${el[@]}" && launch "elastic-$zero-1" 1 "${el[@]}"; then
    expect_eq "elastic (ZeRO-1 $zero): width 2 and width 1 compute the same bits" \
      "$(agreed "elastic-$zero-2" 2)" "$(agreed "elastic-$zero-1" 1)"
  fi
done

if ((failures > 0)); then
  echo "trainer_layouts_test ($device): $failures failure(s)" >&2
  exit 1
fi
echo "trainer_layouts_test ($device): all passed"
