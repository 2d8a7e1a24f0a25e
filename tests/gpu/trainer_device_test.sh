#!/usr/bin/env bash
# bulwark-train on one device, end to end: with deterministic kernels
# (BULWARK_CUDA_DETERMINISTIC=1) the same seed gives the same parameter
# checksum twice, and a run stopped at step 10 and resumed from its disk
# checkpoint ends with the checksum of the uninterrupted run; the default
# (fast: flash attention, fused AdamW, atomics) trains to the deterministic
# run's loss within 3%. For fp32 and bf16. And the alignment run
# (--align) gives one hash in two processes on the device, another under a
# drifting matmul. Registered with the CTest label `gpu` when CMake finds a CUDA
# libtorch (tests/gpu/CMakeLists.txt, DEVICE=cuda); runs on the CPU too
# (DEVICE=cpu), which is how it was checked on a machine without a GPU.
#
#   tests/gpu/trainer_device_test.sh BULWARK_TRAIN DATA_DIR [DEVICE]
#
# DATA_DIR: written by `bulwark-train prepare --corpus kjv --vocab-size 512`
# (scripts/gpu-build.sh prepares one into the kit).
set -euo pipefail

train=${1:?usage: $0 BULWARK_TRAIN DATA_DIR [DEVICE]}
data=${2:?usage: $0 BULWARK_TRAIN DATA_DIR [DEVICE]}
device=${3:-cuda}
[[ -x $train ]] || { echo "trainer_device_test: $train is not an executable" >&2; exit 1; }
[[ -f $data/meta.json || -d $data ]] || { echo "trainer_device_test: no data in $data" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# run NAME ARGS...: trains, keeps stdout in $work/NAME.out; fails the test
# with the trainer's stderr when it exits non-zero.
run() {
  local name=$1
  shift
  if ! "$train" --config tiny --data "$data" --device "$device" --steps 20 --seed 7 --threads 1 \
      --eval-every 0 --memory-ckpt off --log-format json "$@" >"$work/$name.out" 2>"$work/$name.err"; then
    echo "FAIL $name: bulwark-train exited non-zero:" >&2
    tail -n 5 "$work/$name.err" >&2
    return 1
  fi
}
# The done line's param_checksum (empty when there is none), and its loss.
checksum() { grep '"event":"done"' "$work/$1.out" | sed -n 's/.*"param_checksum":"\([0-9a-f]*\)".*/\1/p'; }
final_loss() { grep '"event":"done"' "$work/$1.out" | sed -n 's/.*"loss":\([-0-9.eE+]*\).*/\1/p'; }
expect_eq() {  # WHAT A B
  if [[ -n $2 && $2 == "$3" ]]; then
    echo "ok   $1 ($2)"
  else
    echo "FAIL $1: '$2' != '$3'" >&2
    failures=$((failures + 1))
  fi
}

for precision in fp32 bf16; do
  p=(--precision "$precision")
  # The fast default first, then every bitwise check deterministic.
  unset BULWARK_CUDA_DETERMINISTIC
  run "$precision-fast" "${p[@]}" || { failures=$((failures + 1)); continue; }
  export BULWARK_CUDA_DETERMINISTIC=1
  run "$precision-a" "${p[@]}" || { failures=$((failures + 1)); continue; }
  fast=$(final_loss "$precision-fast") det=$(final_loss "$precision-a")
  if [[ -n $fast && -n $det ]] && awk -v f="$fast" -v d="$det" 'BEGIN { r = (f - d) / d; exit !(r < 0.03 && r > -0.03) }'; then
    echo "ok   $precision: fast run's loss $fast is within 3% of the deterministic run's $det"
  else
    echo "FAIL $precision: fast run's loss '$fast' is not within 3% of the deterministic run's '$det'" >&2
    failures=$((failures + 1))
  fi
  # The start line names the device the run took.
  if grep '"event":"start"' "$work/$precision-a.out" | grep -q "\"device\":\"$device "; then
    echo "ok   $precision: start line says device $device"
  else
    echo "FAIL $precision: the start line does not name device $device:" >&2
    grep '"event":"start"' "$work/$precision-a.out" >&2 || true
    failures=$((failures + 1))
  fi
  run "$precision-b" "${p[@]}" || { failures=$((failures + 1)); continue; }
  expect_eq "$precision: same seed, same checksum" "$(checksum "$precision-a")" "$(checksum "$precision-b")"

  ckpt="$work/ckpt-$precision"
  run "$precision-stop" "${p[@]}" --ckpt-dir "$ckpt" --ckpt-every 10 --stop-at 10 || { failures=$((failures + 1)); continue; }
  run "$precision-resume" "${p[@]}" --ckpt-dir "$ckpt" --ckpt-every 10 --resume || { failures=$((failures + 1)); continue; }
  if ! grep -q '"start_step":10' "$work/$precision-resume.out"; then
    echo "FAIL $precision: the resumed run did not start from step 10" >&2
    failures=$((failures + 1))
  fi
  expect_eq "$precision: resume from disk at step 10 is bitwise" "$(checksum "$precision-a")" \
    "$(checksum "$precision-resume")"
done

# The alignment run (trainer/diag/align.h) on the device: two processes
# compute one hash, on every GPU of the machine (which must agree), and a
# silently drifting matmul changes it.
align() {  # NAME [ENV...]: the JSON line of `--align --align-steps 3` on $device
  if ! env "${@:2}" "$train" --config tiny --device "$device" --align --align-steps 3 >"$work/$1.out" 2>"$work/$1.err"; then
    echo "FAIL alignment $1: bulwark-train --align exited non-zero:" >&2
    tail -n 5 "$work/$1.err" >&2
    failures=$((failures + 1))
  fi
}
align_hash() { sed -n 's/.*"align_hash":"\([0-9a-f]*\)".*/\1/p' "$work/$1.out"; }
align align-a && align align-b && align align-drift BULWARK_SDC=drift
expect_eq "alignment: two processes, one hash" "$(align_hash align-a)" "$(align_hash align-b)"
if grep -q "\"device\":\"$device\"" "$work/align-a.out" && ! grep -q gpus_disagree "$work/align-a.out"; then
  echo "ok   alignment: ran on $device ($(sed -n 's/.*"device":"[a-z]*"\(,"gpus":[0-9]*\)\{0,1\}.*/device '"$device"'\1/p' "$work/align-a.out"))"
else
  echo "FAIL alignment: did not run on $device, or the GPUs disagreed:" >&2
  cat "$work/align-a.out" >&2
  failures=$((failures + 1))
fi
if [[ -n $(align_hash align-drift) && $(align_hash align-drift) != "$(align_hash align-a)" ]]; then
  echo "ok   alignment: a drifting matmul changes the hash"
else
  echo "FAIL alignment: BULWARK_SDC=drift left the hash at '$(align_hash align-drift)'" >&2
  failures=$((failures + 1))
fi

if ((failures > 0)); then
  echo "trainer_device_test ($device): $failures failure(s)" >&2
  exit 1
fi
echo "trainer_device_test ($device): all passed"
