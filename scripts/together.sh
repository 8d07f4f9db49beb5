#!/usr/bin/env bash
# Runs commands at the same time and waits for all of them: one phase of `make test` (scripts/phases.sh)
# that overlaps a CPU-bound check with the test run, which spends much of its time waiting on the jobs it
# meters. Prints each command's wall time and status as it ends; the exit status is the first failure's.
# Usage: scripts/together.sh NAME COMMAND [NAME COMMAND]...
set -uo pipefail
pids=()
while [ $# -ge 2 ]; do
  (
    start=$(date +%s)
    bash -c "$2"
    rc=$?
    s=$(($(date +%s) - start))
    printf '== %s: %dm %02ds%s\n' "$1" $((s / 60)) $((s % 60)) "$([ $rc -ne 0 ] && echo " (FAILED, exit $rc)")"
    exit $rc
  ) &
  pids+=($!)
  shift 2
done
rc=0
for pid in "${pids[@]}"; do
  wait "$pid"
  r=$?
  [ $rc -eq 0 ] && rc=$r
done
exit $rc
