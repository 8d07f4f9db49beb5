#!/usr/bin/env bash
# Runs the phases of `make test` in order, printing each one's wall time as it ends and a table of all of
# them at the end (also when a phase fails: the failing phase is the last row, and the exit status is its).
# Usage: scripts/phases.sh NAME COMMAND [NAME COMMAND]...
set -uo pipefail
names=() secs=()
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
  if [ $rc -ne 0 ]; then
    summary
    exit $rc
  fi
done
summary
