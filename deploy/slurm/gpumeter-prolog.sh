#!/bin/sh
# Slurm Prolog: notes where the job's GPU counters on this node stand when it starts (normally 0; a requeued
# job keeps its history) and the start time, so the epilog can report the difference and charge allocated
# GPUs the job never used. Install as Prolog= (or call it from your prolog). Never fails or delays the job:
# every problem is logged and the script exits 0 within about GPUMETER_TIMEOUT_S seconds.
# Settings (environment, or /etc/default/gpumeter-slurm): GPUMETER_URL (default http://127.0.0.1:9835),
# GPUMETER_SLURM_DIR (default /var/lib/gpumeter/slurm), GPUMETER_SLURM_LOG (default
# /var/log/gpumeter/slurm-jobs.log), GPUMETER_TIMEOUT_S (default 3), GPUMETER_CURL_ARGS.
set -u
[ -r /etc/default/gpumeter-slurm ] && . /etc/default/gpumeter-slurm
url="${GPUMETER_URL:-http://127.0.0.1:9835}"
dir="${GPUMETER_SLURM_DIR:-/var/lib/gpumeter/slurm}"
log="${GPUMETER_SLURM_LOG:-/var/log/gpumeter/slurm-jobs.log}"
say() {
  mkdir -p "$(dirname "$log")" 2>/dev/null
  printf '%s gpumeter prolog: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >> "$log" 2>/dev/null
  printf 'gpumeter prolog: %s\n' "$*" >&2
}
job="${SLURM_JOB_ID:-}"
case "$job" in
  '' | *[!0-9]*)
    say "bad SLURM_JOB_ID '$(printf '%s' "$job" | tr -c 'A-Za-z0-9_.-' '?' | cut -c1-40)'; job not metered"
    exit 0 ;;
esac
mkdir -p "$dir" 2>/dev/null || { say "cannot create $dir; job $job not metered"; exit 0; }
start=$(date +%s)
metrics=$(curl -sf --max-time "${GPUMETER_TIMEOUT_S:-3}" ${GPUMETER_CURL_ARGS:-} "$url/metrics" 2>/dev/null) || {
  say "agent at $url not reachable; job $job starts from 0"
  metrics=""
}
sums=$(printf '%s\n' "$metrics" | awk -v job="$job" '
  index($0, "slurm_job=\"" job "\"") == 0 { next }
  index($0, "gpumeter_owner_cost_usd_total{") == 1 { c += $NF }
  index($0, "gpumeter_owner_idle_cost_usd_total{") == 1 { i += $NF }
  index($0, "gpumeter_owner_energy_joules_total{") == 1 { e += $NF }
  END { printf "%.6f %.6f %.3f", c, i, e }')
printf '%s %s\n' "$sums" "$start" > "$dir/job_$job.start" 2>/dev/null || say "cannot write $dir/job_$job.start"
exit 0
