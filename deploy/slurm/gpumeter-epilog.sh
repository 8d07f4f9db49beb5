#!/bin/sh
# Slurm Epilog: the job's GPU cost on this node, as measured by the local gpumeter agent, since the prolog.
#  - appends one line per job and node to GPUMETER_SLURM_LOG (default /var/log/gpumeter/slurm-jobs.log):
#      time=... job=ID user=USER account=A partition=P node=HOST gpus=0,1 cost_usd=X idle_cost_usd=I
#      unused_gpu_cost_usd=U energy_j=E gpu_seconds=S
#  - writes "gpumeter cost_usd=X idle_cost_usd=I unused_gpu_cost_usd=U energy_j=E" into the job's
#    AdminComment (scontrol update; shown by `scontrol show job` and `sacct -o AdminComment`) unless
#    GPUMETER_SLURM_ADMIN_COMMENT=0. The epilog runs as SlurmdUser (root), which may set AdminComment.
# cost_usd is what the job's processes were charged on the GPUs they used (their share when a GPU is
# shared); unused_gpu_cost_usd is the price of each allocated GPU (SLURM_JOB_GPUS) where the job never ran
# a process, for the job's duration. Never fails or delays the job: every problem is logged and the script
# exits 0 within about 5 × GPUMETER_TIMEOUT_S seconds.
# AdminComment: `scontrol update` works while slurmctld still lets the job record change; Slurm 22.05 refuses
# it once the job has finished (which it has when the Epilog runs), so the epilog then writes the accounting
# record with `sacctmgr modify job` (needs slurmdbd; shown by `sacct -o JobID,AdminComment`).
# Settings (environment, or /etc/default/gpumeter-slurm): see gpumeter-prolog.sh.
set -u
[ -r /etc/default/gpumeter-slurm ] && . /etc/default/gpumeter-slurm
url="${GPUMETER_URL:-http://127.0.0.1:9835}"
dir="${GPUMETER_SLURM_DIR:-/var/lib/gpumeter/slurm}"
log="${GPUMETER_SLURM_LOG:-/var/log/gpumeter/slurm-jobs.log}"
timeout_s="${GPUMETER_TIMEOUT_S:-3}"
out="" dbout=""
say() {
  mkdir -p "$(dirname "$log")" 2>/dev/null
  printf '%s gpumeter epilog: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >> "$log" 2>/dev/null
  printf 'gpumeter epilog: %s\n' "$*" >&2
}
job="${SLURM_JOB_ID:-}"
case "$job" in
  '' | *[!0-9]*)
    say "bad SLURM_JOB_ID '$(printf '%s' "$job" | tr -c 'A-Za-z0-9_.-' '?' | cut -c1-40)'; nothing recorded"
    exit 0 ;;
esac
now=$(date +%s)
base_cost=0 base_idle=0 base_energy=0 start=""
if [ -r "$dir/job_$job.start" ]; then
  read -r base_cost base_idle base_energy start < "$dir/job_$job.start" 2>/dev/null
fi
rm -f "$dir/job_$job.start" 2>/dev/null
metrics=$(curl -sf --max-time "$timeout_s" ${GPUMETER_CURL_ARGS:-} "$url/metrics" 2>/dev/null) || {
  say "agent at $url not reachable; job $job not recorded"
  exit 0
}
gpus=$(printf '%s' "${SLURM_JOB_GPUS:-}" | tr -c '0-9,' ',')
# One pass over the exposition: the job's sums, the GPUs it used, and the price of each GPU.
line=$(printf '%s\n' "$metrics" | awk -v job="$job" -v gpus="$gpus" -v now="$now" -v start="${start:-}" \
  -v bc="${base_cost:-0}" -v bi="${base_idle:-0}" -v be="${base_energy:-0}" '
  function gpu_of(s,   p) { p = index(s, "{gpu=\""); if (!p) return ""; s = substr(s, p + 6); return substr(s, 1, index(s, "\"") - 1) }
  function uuid_of(s,   p) { p = index(s, ",uuid=\""); if (!p) return ""; s = substr(s, p + 7); return substr(s, 1, index(s, "\"") - 1) }
  index($0, "gpumeter_gpu_price_usd_per_hour{") == 1 { price[gpu_of($0)] = $NF; uuid[gpu_of($0)] = uuid_of($0); next }
  index($0, "slurm_job=\"" job "\"") == 0 { next }
  index($0, "gpumeter_owner_cost_usd_total{") == 1 { c += $NF; n++; if ($NF > 0) used[gpu_of($0)] = 1 }
  index($0, "gpumeter_owner_idle_cost_usd_total{") == 1 { i += $NF }
  index($0, "gpumeter_owner_energy_joules_total{") == 1 { e += $NF; ne++ }
  index($0, "gpumeter_owner_gpu_seconds_total{") == 1 { s += $NF; ns++ }
  END {
    u = 0; uk = 0
    if (start != "" && gpus != "") {
      k = split(gpus, g, ",")
      for (j = 1; j <= k; j++) if (g[j] != "" && !(g[j] in used) && (g[j] in price)) { u += price[g[j]] * (now - start) / 3600; uk = 1 }
    }
    alloc = ""; usedl = ""
    k = split(gpus, g, ",")
    for (j = 1; j <= k; j++) if (g[j] in uuid) alloc = alloc (alloc == "" ? "" : ",") uuid[g[j]]
    for (x in used) if (x in uuid) usedl = usedl (usedl == "" ? "" : ",") uuid[x]
    printf "%s %s %s %s %s %s %s",
      n ? sprintf("%.6f", c - bc) : "0", n ? sprintf("%.6f", i - bi) : "0",
      uk ? sprintf("%.6f", u) : (start == "" && gpus != "" ? "n/a" : "0"),
      ne ? sprintf("%.3f", e - be) : "n/a", ns ? sprintf("%.3f", s) : "0",
      alloc == "" ? "-" : alloc, usedl == "" ? "-" : usedl
  }')
set -- ${line:-0 0 0 n/a 0 - -}
cost=$1 idle=$2 unused=$3 energy=$4 seconds=$5 alloc_uuids=$6 used_uuids=$7
mkdir -p "$(dirname "$log")" 2>/dev/null
printf 'time=%s job=%s user=%s account=%s partition=%s node=%s gpus=%s cost_usd=%s idle_cost_usd=%s unused_gpu_cost_usd=%s energy_j=%s gpu_seconds=%s\n' \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$job" "${SLURM_JOB_USER:-unknown}" "${SLURM_JOB_ACCOUNT:-}" \
  "${SLURM_JOB_PARTITION:-}" "$(hostname)" "${gpus:-}" "$cost" "$idle" "$unused" "$energy" "$seconds" >> "$log" 2>/dev/null
if [ "${GPUMETER_SLURM_ADMIN_COMMENT:-1}" != 0 ]; then
  comment="gpumeter cost_usd=$cost idle_cost_usd=$idle unused_gpu_cost_usd=$unused energy_j=$energy"
  if ! command -v scontrol >/dev/null 2>&1; then
    say "scontrol not found; job $job cost not written to its AdminComment"
  elif out=$(timeout "$timeout_s" scontrol update JobId="$job" AdminComment="$comment" 2>&1); then
    :
  elif command -v sacctmgr >/dev/null 2>&1 &&
    dbout=$(timeout "$timeout_s" sacctmgr -i modify job where JobID="$job" set AdminComment="$comment" 2>&1) &&
    printf '%s' "$dbout" | grep -q "Modified"; then
    : # a finished job's record can only be changed in accounting (Slurm 22.05: "Job has already finished")
  else
    say "job $job AdminComment not written: scontrol: $(printf '%s' "$out" | tr '\n' ' ' | cut -c1-160)${dbout:+; sacctmgr: $(printf '%s' "$dbout" | tr '\n' ' ' | cut -c1-160)}"
  fi
fi
# The job as a run in this node's ledger (GPUMETER_LEDGER; GPUMETER_SLURM_LEDGER=0 skips), for
# `gpumeter report --by slurm-account|user|partition`. Job name and final state come from slurmctld.
if [ "${GPUMETER_SLURM_LEDGER:-1}" != 0 ]; then
  bin="${GPUMETER_BIN:-gpumeter}"
  if ! command -v "$bin" >/dev/null 2>&1; then
    say "$bin not found; job $job not recorded in the ledger"
  else
    info=""
    command -v scontrol >/dev/null 2>&1 && info=$(timeout "$timeout_s" scontrol -o show job "$job" 2>/dev/null)
    field() { printf '%s\n' "$info" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1; }
    name=$(field JobName) state=$(field JobState)
    status=succeeded stopped=""
    case "$state" in
      CANCELLED* | TIMEOUT | OUT_OF_MEMORY | NODE_FAIL | PREEMPTED | DEADLINE) status=interrupted stopped="slurm:$state" ;;
      FAILED | BOOT_FAIL) status=failed ;;
    esac
    ec="${SLURM_JOB_EXIT_CODE2:-}"
    ec="${ec%%:*}"
    case "$ec" in '' | *[!0-9]*) ec="" ;; esac
    num() { case "$1" in '' | *[!0-9.]*) echo 0 ;; *) echo "$1" ;; esac; }
    set -- --name "slurm job $job${name:+ ($name)}" --user "${SLURM_JOB_USER:-unknown}" \
      --start-unix "${start:-$now}" --end-unix "$now" --status "$status" \
      --cost-usd "$(num "$cost")" --idle-cost-usd "$(num "$idle")" --unused-gpu-cost-usd "$(num "$unused")" \
      --label "slurm.job=$job" --label "slurm.account=${SLURM_JOB_ACCOUNT:-}" \
      --label "slurm.partition=${SLURM_JOB_PARTITION:-}" --label "slurm.job_name=$name"
    [ -n "$stopped" ] && set -- "$@" --stopped-by "$stopped"
    [ -n "$ec" ] && set -- "$@" --exit-code "$ec"
    [ "$alloc_uuids" != - ] && set -- "$@" --gpus-allocated "$alloc_uuids"
    [ "$used_uuids" != - ] && set -- "$@" --gpus-used "$used_uuids"
    [ "$energy" != n/a ] && set -- "$@" --energy-j "$(num "$energy")"
    out=$(timeout "$timeout_s" "$bin" record-job --ledger "${GPUMETER_LEDGER:-/var/lib/gpumeter/ledger.db}" "$@" 2>&1) || say "job $job not recorded in the ledger: $(printf '%s' "$out" | tr '\n' ' ' | cut -c1-200)"
  fi
fi
exit 0
