#!/bin/sh
# Slurm Prolog: records the job's GPU cost on this node when it starts (normally 0; a requeued job keeps its
# history), so the epilog can report the difference. Install as Prolog= (or call it from your prolog).
# Settings: GPUMETER_URL (default http://127.0.0.1:9835), GPUMETER_SLURM_DIR (default /var/lib/gpumeter/slurm).
set -u
url="${GPUMETER_URL:-http://127.0.0.1:9835}"
dir="${GPUMETER_SLURM_DIR:-/var/lib/gpumeter/slurm}"
job="${SLURM_JOB_ID:?SLURM_JOB_ID not set}"
case "$job" in *[!0-9]*) echo "gpumeter prolog: bad SLURM_JOB_ID" >&2; exit 0 ;; esac
mkdir -p "$dir" 2>/dev/null || exit 0
cost=$(curl -sf --max-time 5 ${GPUMETER_CURL_ARGS:-} "$url/metrics" 2>/dev/null |
  awk -v job="$job" 'index($0, "gpumeter_owner_cost_usd_total{") == 1 && index($0, "slurm_job=\"" job "\"") { s += $NF } END { printf "%.6f", s }')
[ -n "$cost" ] || cost="0.000000"
printf '%s\n' "$cost" > "$dir/job_$job.start"
# A prolog must never fail the job because metering is down.
exit 0
