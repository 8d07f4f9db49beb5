#!/usr/bin/env bash
# Runs commands at the same time and waits for all of them: one phase of `make test` (scripts/phases.sh)
# that overlaps a CPU-bound check with the test run, which spends much of its time waiting on the jobs it
# meters. Prints each command's wall time and status as it ends; the exit status is the first failure's.
# Usage: scripts/together.sh NAME COMMAND [NAME COMMAND]...
set -uo pipefail
names=() pids=() starts=()
while [ $# -ge 2 ]; do
  names+=("$1")
  starts+=("$(date +%s)")
  bash -c "$2" &
  pids+=($!)
  shift 2
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  r=$?
  s=$(($(date +%s) - starts[i]))
  printf '== %s: %dm %02ds%s\n' "${names[$i]}" $((s / 60)) $((s % 60)) "$([ $r -ne 0 ] && echo " (FAILED, exit $r)")"
  [ $rc -eq 0 ] && rc=$r
done
exit $rc
