#!/usr/bin/env bash
# Runs every libFuzzer target under fuzz/ for FUZZ_SECONDS each, JOBS at a time, starting from its seed corpus
# fuzz/corpus/<target>/ (regression inputs included) plus what earlier runs found in BUILD/corpus-<target>/.
# Fails when any target finds a crash, a hang (-timeout), a sanitizer report or a leak; prints its log and the
# input that did it (BUILD/crash-<target>-*).
# Usage: scripts/fuzz.sh BUILD_DIR FUZZ_SECONDS JOBS
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?build dir}
seconds=${2:-30}
jobs=${3:-2}

targets=()
for f in fuzz/*.cpp; do targets+=("$(basename "$f" .cpp)"); done

run_one() {
  local build=$1 seconds=$2 n=$3
  mkdir -p "$build/corpus-$n" "$build/logs"
  local seeds=()
  [ -d "fuzz/corpus/$n" ] && seeds=("fuzz/corpus/$n")
  local log="$build/logs/$n.log"
  # UBSan reports abort (the targets are built with -fno-sanitize-recover); LSan is on by default under ASan.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/$n" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$build/crash-$n-" "$build/corpus-$n" "${seeds[@]}" >"$log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "fuzz: $n FAILED (exit $rc); its log ($log) ends:"
    tail -n 60 "$log"
    return 1
  fi
  echo "fuzz: $n ok, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs in ${seconds}s," \
    "corpus $(ls "$build/corpus-$n" | wc -l) inputs"
}
export -f run_one

echo "fuzz: ${#targets[@]} targets, ${seconds}s each, $jobs at a time"
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ "$build" "$seconds" {}
rc=$?
if [ $rc -ne 0 ]; then
  echo "fuzz: a target failed (see above); reproduce with $build/<target> $build/crash-<target>-<hash>"
  exit 1
fi
