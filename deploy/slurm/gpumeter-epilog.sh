#!/bin/sh
# Slurm Epilog: appends the job's GPU cost and energy on this node, as measured by the local gpumeter agent,
# to GPUMETER_SLURM_LOG (default /var/log/gpumeter/slurm-jobs.log), one line per job and node:
#   time=... job=ID user=USER node=HOST cost_usd=X energy_j=Y gpu_seconds=Z
# With GPUMETER_SLURM_ADMIN_COMMENT=1 it also writes the cost into the job's AdminComment (scontrol).
set -u
url="${GPUMETER_URL:-http://127.0.0.1:9835}"
dir="${GPUMETER_SLURM_DIR:-/var/lib/gpumeter/slurm}"
log="${GPUMETER_SLURM_LOG:-/var/log/gpumeter/slurm-jobs.log}"
job="${SLURM_JOB_ID:?SLURM_JOB_ID not set}"
case "$job" in *[!0-9]*) echo "gpumeter epilog: bad SLURM_JOB_ID" >&2; exit 0 ;; esac
metrics=$(curl -sf --max-time 5 ${GPUMETER_CURL_ARGS:-} "$url/metrics" 2>/dev/null) || {
  echo "gpumeter epilog: agent at $url not reachable; job $job not recorded" >&2
  exit 0
}
sum_metric() {
  printf '%s\n' "$metrics" |
    awk -v m="$1{" -v job="$job" 'index($0, m) == 1 && index($0, "slurm_job=\"" job "\"") { s += $NF; n++ } END { if (n) printf "%.6f", s; else printf "n/a" }'
}
cost=$(sum_metric gpumeter_owner_cost_usd_total)
energy=$(sum_metric gpumeter_owner_energy_joules_total)
seconds=$(sum_metric gpumeter_owner_gpu_seconds_total)
start="0"
[ -r "$dir/job_$job.start" ] && start=$(cat "$dir/job_$job.start")
if [ "$cost" != "n/a" ]; then
  cost=$(awk -v a="$cost" -v b="$start" 'BEGIN { printf "%.6f", a - b }')
fi
mkdir -p "$(dirname "$log")" 2>/dev/null
printf 'time=%s job=%s user=%s node=%s cost_usd=%s energy_j=%s gpu_seconds=%s\n' \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$job" "${SLURM_JOB_USER:-unknown}" "$(hostname)" "$cost" "$energy" "$seconds" >> "$log"
rm -f "$dir/job_$job.start"
if [ "${GPUMETER_SLURM_ADMIN_COMMENT:-0}" = 1 ] && command -v scontrol >/dev/null 2>&1; then
  scontrol update JobId="$job" AdminComment="gpumeter cost_usd=$cost energy_j=$energy" >/dev/null 2>&1
fi
exit 0
