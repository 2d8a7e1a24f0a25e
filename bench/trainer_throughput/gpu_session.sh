#!/usr/bin/env bash
# bench/trainer_throughput/gpu_session.sh: issue 41's whole device check in
# one command, most important first, each part cut to what is left of
# HARD_S seconds (default 560):
#   1. scripts/gpu-build.sh --build: the trainer against the wheel's
#      libtorch (fused CUDA kernels on when nvcc builds them), then
#      `ctest -L gpu` (determinism and exact resume; fused vs libtorch
#      kernels; POET, pipeline stages and elastic replicas on the device);
#   2. the alignment run on the GPU (its time, tiny and 88M); gpu_cluster.py: a CUDA job on a local cluster through a kill and a
#      machine-down, with in-memory checkpoints, and a CUDA rank's cold start;
#      then, time allowing, the same faults for an elastic job (--elastic);
#   3. gpu.sh without its build: tokens/s and MFU of bulwark-train and the
#      PyTorch peer, with what time is left.
# Carry build-gpu-kit (scripts/gpu-build.sh on the CI machine). Everything
# lands in $OUT: summary.txt, cluster.txt, build.log, steps.log,
# results.jsonl, runs.log, incidents.json, cluster-logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/gpu-session}
mkdir -p "$OUT"
HARD_S=${HARD_S:-560}
KIT=${KIT:-build-gpu-kit}
t0=$SECONDS
say() { echo "[$((SECONDS - t0))s] $*" | tee -a "$OUT/steps.log"; }

say "machine: $(nvidia-smi -L 2>&1 | head -n 1); $(nproc) cores"
scripts/gpu-build.sh --build >"$OUT/build.log" 2>&1
echo $? >"$OUT/build.rc"
say "build and gpu tests: exit $(cat "$OUT/build.rc"); $(grep -E '% tests passed|tests failed' "$OUT/build.log" | tail -n 1)"
grep -E '^(ok|FAIL|fused|eager|max|kernel|match|time)' "$OUT/build.log" | head -n 40
# Which NCCL the trainer loads (the wheel's or the toolkit's: one per process).
[[ -x build-gpu/bin/bulwark-train ]] &&
  say "nccl: $(ldd build-gpu/bin/bulwark-train | grep -o 'libnccl[^ ]* => [^ ]*' || echo 'not linked (BULWARK_NCCL off)')"

if [[ -x build-gpu/bin/bulwark-train ]]; then
  # shellcheck source=/dev/null
  source "$KIT/env.sh"
  # The ladder's alignment run on the GPU (every GPU in turn, deterministic):
  # its hash line and time, the tiny model (the periodic check's) and the
  # 88M shape (a stop-time check of that job); a "gpus_disagree" here is a
  # finding about this machine.
  for shape in "--config tiny" "--d-model 768 --n-layers 12 --n-heads 12 --ffn 2048 --context 1024 --vocab-size 2048"; do
    # shellcheck disable=SC2086
    say "alignment on the GPU ($shape): $(timeout 60 build-gpu/bin/bulwark-train $shape --device cuda --align 2>&1 | tail -n 1)"
  done
  say "cluster: a kill, then a machine-down, with CUDA ranks"
  timeout 170 python3 bench/trainer_throughput/gpu_cluster.py --train build-gpu/bin/bulwark-train \
    --data "$KIT/data/kjv" --out "$OUT" >"$OUT/cluster.out" 2>&1
  say "cluster: exit $?"
  # Nothing of it may share the GPU with the timings below.
  bulwark down --dir /tmp/bw-gpu-cluster/cluster >/dev/null 2>&1
  pkill -9 -f 'bulwark-train|bulwark agent|bulwark controller' 2>/dev/null
  cat "$OUT/cluster.txt" 2>/dev/null || tail -n 20 "$OUT/cluster.out"
  # The same faults for an elastic job on CUDA ranks: its lines go into
  # steps.log (the device tool brings back few files).
  if ((HARD_S - (SECONDS - t0) > 150)); then
    say "cluster: the same faults, an elastic job (the survivor trains on, the lost replica rejoins from it)"
    timeout 120 python3 bench/trainer_throughput/gpu_cluster.py --train build-gpu/bin/bulwark-train \
      --data "$KIT/data/kjv" --out /tmp/gpu-elastic --elastic --first 60 >/tmp/gpu-elastic.out 2>&1
    say "elastic cluster: exit $?"
    bulwark down --dir /tmp/bw-gpu-cluster/cluster >/dev/null 2>&1
    pkill -9 -f 'bulwark-train|bulwark agent|bulwark controller' 2>/dev/null
    { cat /tmp/gpu-elastic/cluster.txt 2>/dev/null || tail -n 20 /tmp/gpu-elastic.out; } | tee -a "$OUT/steps.log"
  fi
fi

left=$((HARD_S - (SECONDS - t0)))
say "throughput: ${left} s left"
((left > 40)) && OUT=$OUT HARD_S=$left SKIP_BUILD=1 bash bench/trainer_throughput/gpu.sh >/dev/null 2>&1
cat "$OUT/summary.txt" 2>/dev/null
say "done"
