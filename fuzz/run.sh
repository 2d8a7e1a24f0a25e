#!/usr/bin/env bash
# make fuzz: builds the harnesses with clang, libFuzzer, ASan and UBSan in
# build-fuzz/ (only them and the parser libraries they link: no libtorch,
# no gRPC), then runs each for FUZZ_SECONDS (default 60) and prints its
# final executions and coverage. New inputs go to build-fuzz/corpus/NAME,
# never into the repository: copy the ones worth keeping (crashes, once
# fixed) to fuzz/corpus/NAME/crash-<what-it-broke>. Stops at the first
# harness that crashes, leaving the input in build-fuzz/artifacts/NAME/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
HARNESSES=${FUZZ_HARNESSES:-"job_file signatures shard_image record_file journal train_config slurm_text"}

CXX=${FUZZ_CXX:-clang++} cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBULWARK_FUZZ=ON >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target fuzz_harnesses

summary=()
for h in $HARNESSES; do
  mkdir -p "$BUILD/corpus/$h" "$BUILD/artifacts/$h"
  log="$BUILD/artifacts/$h/fuzz.log"
  echo "== fuzz_$h: ${SECONDS_EACH}s"
  # The first corpus directory receives new inputs; the repository's seeds
  # and regression inputs are read only.
  if ! "$BUILD/bin/fuzz_$h" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$BUILD/artifacts/$h/" "$BUILD/corpus/$h" "fuzz/corpus/$h" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz_$h CRASHED: input in $BUILD/artifacts/$h/, log in $log" >&2
    exit 1
  fi
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
  echo "$done_line"
  summary+=("$(printf '%-13s %s' "$h" "$done_line")")
done
echo "== fuzz summary (${SECONDS_EACH}s each; #N = executions, cov = edges covered)"
printf '%s\n' "${summary[@]}"
