#!/usr/bin/env bash
# Runs the phases of `make test` in order, printing each one's wall time as it ends and a table of all of
# them at the end (also when a phase fails: the failing phase is the last row, and the exit status is its).
# PHASES_KEEP_GOING=1 goes on after a failed phase (a timing run, scripts/time_demo.sh test); the exit status
# is then the first failed phase's.
# Usage: scripts/phases.sh NAME COMMAND [NAME COMMAND]...
set -uo pipefail
names=() secs=()
first_rc=0
fmt() { printf '%dm %02ds' $(($1 / 60)) $(($1 % 60)); }
summary() {
  local total=0 i
  echo "== make test: time per phase"
  for i in "${!names[@]}"; do
    printf '   %-16s %s\n' "${names[$i]}" "$(fmt "${secs[$i]}")"
    total=$((total + secs[i]))
  done
  printf '   %-16s %s\n' "total" "$(fmt $total)"
}
while [ $# -ge 2 ]; do
  name=$1 cmd=$2
  shift 2
  echo "== $name"
  start=$(date +%s)
  bash -c "$cmd"
  rc=$?
  names+=("$name")
  secs+=($(($(date +%s) - start)))
  echo "== $name: $(fmt "${secs[-1]}")$([ $rc -ne 0 ] && echo " (FAILED, exit $rc)")"
  if [ $rc -ne 0 ] && [ "${PHASES_KEEP_GOING:-0}" != 1 ]; then
    summary
    exit $rc
  fi
  [ $first_rc -eq 0 ] && first_rc=$rc
done
summary
exit $first_rc
