#!/usr/bin/env bash
# The libFuzzer targets under fuzz/ (built in the sanitized build), JOBS at a time, in one of two modes:
#
#   check    (make test): deterministic. Each target first replays every input of its checked-in corpus
#            fuzz/corpus/<target>/ (the seeds and every crash ever found, kept as regression inputs), then
#            fuzzes from that corpus alone with a fixed seed for a fixed number of runs (fuzz/runs.txt, or
#            FUZZ_RUNS for all). New inputs go to a scratch folder that is removed afterwards, so the same
#            commit gives the same executions, the same coverage and the same outcome on every machine.
#   explore  (make fuzz, make fuzz FUZZ_SECONDS=600): random. Each target runs for SECONDS with libFuzzer's
#            own seed from fuzz/corpus/<target>/ plus what earlier explore runs found in BUILD/corpus-<target>/
#            (the build-local corpus grows). A new crash is BUILD/crash-<target>-<hash>: fix the cause, then
#            copy the input to fuzz/corpus/<target>/regression_<what>.<ext> in the same commit, so `make test`
#            replays it from then on (docs/reliability.md).
#
# Fails when any target finds a crash, a hang (-timeout), a sanitizer report or a leak; prints its log's end
# and the input that did it.
# Usage: scripts/fuzz.sh BUILD_DIR check|explore [JOBS] [SECONDS]   (env: FUZZ_SEED, FUZZ_RUNS, FUZZ_TARGETS)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?build dir}
mode=${2:?check or explore}
jobs=${3:-2}
seconds=${4:-30}
seed=${FUZZ_SEED:-1}
case $mode in check | explore) ;; *) echo "fuzz: mode '$mode': expected check or explore" >&2; exit 2 ;; esac

# FUZZ_TARGETS="fuzz_a fuzz_b" runs only those (default: every fuzz/*.cpp).
targets=()
if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  for f in fuzz/*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
for t in "${targets[@]}"; do
  [ -x "$build/$t" ] || { echo "fuzz: $build/$t is not built (make san)" >&2; exit 2; }
done

# Runs of the seeded step per target: fuzz/runs.txt ("target runs" lines), FUZZ_RUNS overriding all.
runs_of() {
  if [ -n "${FUZZ_RUNS:-}" ]; then echo "$FUZZ_RUNS"; return; fi
  local n
  n=$(awk -v t="$1" '$1 == t { print $2 }' fuzz/runs.txt 2>/dev/null)
  echo "${n:-$(awk '$1 == "default" { print $2 }' fuzz/runs.txt 2>/dev/null)}"
}

# libFuzzer's own options shared by both modes. UBSan reports abort (the targets are built with
# -fno-sanitize-recover); LSan is on by default under ASan.
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
common=(-timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1)

stat() { grep -o "stat::$2: *[0-9]*" "$1" | grep -o '[0-9]*$' | tail -n 1; }

fail() {
  local n=$1 rc=$2 log=$3
  echo "fuzz: $n FAILED (exit $rc); its log ($log) ends:"
  tail -n 60 "$log"
  return 1
}

run_check() {
  local build=$1 n=$2 runs=$3 seed=$4
  local log="$build/fuzz-logs/$n.log" scratch
  # Replay: every checked-in input once, by name (a crash here is a regression of a fixed finding).
  local inputs=()
  [ -d "fuzz/corpus/$n" ] && mapfile -t inputs < <(find "fuzz/corpus/$n" -type f | LC_ALL=C sort)
  if [ ${#inputs[@]} -gt 0 ]; then
    "$build/$n" "${common[@]}" -artifact_prefix="$build/crash-$n-" "${inputs[@]}" >"$log.replay" 2>&1 ||
      { fail "$n" $? "$log.replay"; return 1; }
  fi
  # Seeded fuzzing from the checked-in corpus only; what it finds goes to a scratch folder, then away.
  scratch="$build/fuzz-scratch/$n"
  rm -rf "$scratch" && mkdir -p "$scratch"
  local seeds=()
  [ -d "fuzz/corpus/$n" ] && seeds=("fuzz/corpus/$n")
  # Two things would make runs with the same seed differ: libFuzzer rereads its output folder every second
  # (-reload=0 turns that off), and it feeds the operands of the target's comparisons, pointers included,
  # back into its mutations, so heap and stack addresses that ASLR moves change the inputs it tries
  # (no_aslr runs the target with address randomisation off, as setarch -R does).
  $no_aslr "$build/$n" "${common[@]}" -seed="$seed" -runs="$runs" -reload=0 -artifact_prefix="$build/crash-$n-" \
    "$scratch" "${seeds[@]}" >"$log" 2>&1
  local rc=$?
  rm -rf "$scratch"
  [ $rc -eq 0 ] || { fail "$n" $rc "$log"; return 1; }
  # The outcome that must repeat: executions, coverage (cov, ft) and corpus growth of the seeded run.
  local done_line cov ft
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$done_line" | grep -o '[0-9]*')
  ft=$(grep -o 'ft: [0-9]*' <<<"$done_line" | grep -o '[0-9]*')
  echo "fuzz: $n ok: replayed ${#inputs[@]} inputs; seed $seed, $(stat "$log" number_of_executed_units) runs," \
    "cov ${cov:-?} ft ${ft:-?}, $(stat "$log" new_units_added) new inputs"
}

run_explore() {
  local build=$1 n=$2 seconds=$3
  mkdir -p "$build/corpus-$n"
  local seeds=() log="$build/fuzz-logs/$n.log"
  [ -d "fuzz/corpus/$n" ] && seeds=("fuzz/corpus/$n")
  "$build/$n" "${common[@]}" -max_total_time="$seconds" -artifact_prefix="$build/crash-$n-" \
    "$build/corpus-$n" "${seeds[@]}" >"$log" 2>&1 || { fail "$n" $? "$log"; return 1; }
  echo "fuzz: $n ok, $(stat "$log" number_of_executed_units) runs in ${seconds}s," \
    "corpus $(ls "$build/corpus-$n" | wc -l) inputs"
}
export -f run_check run_explore runs_of stat fail
export common_str="${common[*]}"
no_aslr="setarch $(uname -m) -R"
if ! $no_aslr true 2>/dev/null; then
  [ "$mode" = check ] && echo "fuzz: note: address randomisation cannot be turned off here (setarch -R failed):" \
    "the seeded runs may differ from run to run"
  no_aslr=""
fi
export no_aslr

mkdir -p "$build/fuzz-logs"
rm -f "$build"/fuzz-logs/*.result
export FUZZ_SEED_USED=$seed
if [ "$mode" = check ]; then
  echo "fuzz: ${#targets[@]} targets, deterministic: corpus replay, then seed $seed for a fixed number of runs," \
    "$jobs at a time"
  lines=()
  for t in "${targets[@]}"; do
    r=$(runs_of "$t")
    [ -n "$r" ] || { echo "fuzz: no run count for $t (fuzz/runs.txt or FUZZ_RUNS)" >&2; exit 2; }
    lines+=("$t $r")
  done
  printf '%s\n' "${lines[@]}" | xargs -P "$jobs" -L 1 bash -c \
    'common=($common_str); run_check "$1" "$2" "$3" "$FUZZ_SEED_USED" >"$1/fuzz-logs/$2.result"' _ "$build"
  rc=$?
else
  echo "fuzz: ${#targets[@]} targets, ${seconds}s each with random seeds, $jobs at a time"
  printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c \
    'common=($common_str); run_explore "$1" "$2" "$3" >"$1/fuzz-logs/$2.result"' _ "$build" {} "$seconds"
  rc=$?
fi
# One line per target, in name order (the targets finish in any order).
cat $(printf "$build/fuzz-logs/%s.result\n" "${targets[@]}" | LC_ALL=C sort) 2>/dev/null
if [ "$mode" = check ] && [ $rc -eq 0 ]; then
  echo "fuzz: outcome digest $(cat "$build"/fuzz-logs/*.result | LC_ALL=C sort | sha256sum | cut -c1-16)" \
    "(the same for two runs of the same commit)"
fi
if [ $rc -ne 0 ]; then
  echo "fuzz: a target failed (see above); reproduce with $build/<target> $build/crash-<target>-<hash>"
  exit 1
fi
