#!/usr/bin/env bash
# gpumeter's real-GPU check, in one call on a machine with an NVIDIA GPU, PyTorch, torchvision and nvidia-smi
# (docs/validation.md says what each part checks and records the figures). Here, first:
#   make build && scripts/gpu_check/bundle.sh        # .gpucheck/: the binary and its libraries
# There (from the repository root):
#   OUT=/some/folder scripts/gpu_check/run.sh         # results: $OUT/gpu_check.tar.gz, $OUT/log.txt
# Then here: python3 scripts/gpu_check/summarize.py RESULTS_FOLDER   (it also runs there, into the log)
# Every part has its own time limit and a failed part does not stop the others (about 4 minutes in all).
set -u
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
W=$(mktemp -d)
R=$W/gpu_check
mkdir -p "$R"
exec > >(tee "$OUT/log.txt") 2>&1
here=$PWD
part() { echo "=== $1 ($(date -u +%T))"; }
parts=,${GPU_CHECK_PARTS:-identity,bf16,fp32,ns,startup,trace,peak},  # a rerun may name only the parts it needs
want() { [[ $parts == *",$1,"* ]]; }

if .gpucheck/gpumeter --version >/dev/null 2>&1; then
  GM=("$here/.gpucheck/gpumeter")
else  # the machine's glibc is older than Debian 12's: run with the bundled one
  GM=("$here/.gpucheck/glibc/ld-linux-x86-64.so.2" --library-path "$here/.gpucheck/lib:$here/.gpucheck/glibc"
      "$here/.gpucheck/gpumeter")
fi
unset GPUMETER_NVML_LIBRARY FAKE_NVML_SCENARIO GPUMETER_LEDGER
export PYTHONPATH=$here/python PYTHONUNBUFFERED=1 XDG_DATA_HOME=$W/data XDG_CONFIG_HOME=$W/config
PY=$(command -v python3)
smi_q=name,uuid,pci.bus_id,driver_version,memory.total,memory.used,utilization.gpu,power.draw,temperature.gpu
energy() { "$PY" -c 'import pynvml,time;pynvml.nvmlInit();h=pynvml.nvmlDeviceGetHandleByIndex(0);print(time.time(),pynvml.nvmlDeviceGetTotalEnergyConsumption(h))' >>"$R/energy_mj.txt"; }

part "machine"
{
  nvidia-smi
  uname -a
  head -2 /etc/os-release
  ldd --version | head -1
  "$PY" -c 'import torch,torchvision;print("torch",torch.__version__,"torchvision",torchvision.__version__,torch.cuda.get_device_name(0))'
  echo "gpumeter: ${GM[*]}"
  "${GM[@]}" --version
  readlink /proc/self/ns/pid
} 2>&1 | tee "$R/machine.txt"

want identity && {
part "identity: doctor, gpus --json and nvidia-smi on the idle GPU"
timeout 30 "${GM[@]}" doctor >"$R/doctor.txt" 2>&1
echo "doctor exit $?"
timeout 30 "${GM[@]}" gpus --json >"$R/gpus_idle.json" 2>"$R/gpus_idle.err"
nvidia-smi --query-gpu=$smi_q --format=csv >"$R/smi_idle.csv"
t0=$(date +%s%N)
"${GM[@]}" gpus >/dev/null 2>&1
echo "gpus wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee "$R/gpus_time.txt"
}

want bf16 && {
part "bf16 training under gpumeter run (forecast, start-up, MFU, GPM, energy, processes)"
energy
timeout 180 "${GM[@]}" run --price 3.00 --json-report "$R/run_bf16.json" --status-every 1s --label check=bf16 -- \
  "$PY" scripts/gpu_check/train.py --precision bf16 --seconds 40 --out "$R/job_bf16.json" 2>"$R/run_bf16.stderr" &
run_pid=$!
sleep 30
"${GM[@]}" gpus --json >"$R/gpus_busy.json" 2>/dev/null
nvidia-smi --query-gpu=$smi_q --format=csv >"$R/smi_busy.csv"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$R/smi_apps.csv"
wait $run_pid
echo "run exit $?"
energy
tail -25 "$R/run_bf16.stderr"
}

want fp32 && {
part "fp32 training, TF32 off (GPM: no tensor-core work)"
timeout 120 "${GM[@]}" run --price 3.00 --json-report "$R/run_fp32.json" --label check=fp32 -- \
  "$PY" scripts/gpu_check/train.py --precision fp32 --seconds 12 --out "$R/job_fp32.json" 2>"$R/run_fp32.stderr"
echo "run exit $?"
tail -25 "$R/run_fp32.stderr"
}

want ns && {
part "in a PID namespace of its own, as in a container (are NVML's PIDs foreign there?)"
timeout 90 unshare --pid --fork --mount-proc env CUDA_VISIBLE_DEVICES=0 "${GM[@]}" doctor >"$R/doctor_ns.txt" 2>&1
export GM_STR="${GM[*]}" R PY
timeout 120 unshare --pid --fork --mount-proc env CUDA_VISIBLE_DEVICES=0 bash -c '
  $GM_STR run --price 3.00 --ledger "$R/ledger_ns.db" --json-report "$R/run_ns.json" --label check=pidns -- \
    "$PY" scripts/gpu_check/train.py --precision bf16 --seconds 10 --out "$R/job_ns.json" 2>"$R/run_ns.stderr" &
  sleep 25
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$R/smi_apps_ns_inside.csv" 2>&1
  $GM_STR gpus --json >"$R/gpus_ns_inside.json" 2>&1
  ps -eo pid,args >"$R/ps_ns_inside.txt"
  wait' &
ns_pid=$!
sleep 26
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$R/smi_apps_ns_outside.csv" 2>&1
wait $ns_pid
echo "run exit $?"
cat "$R/smi_apps_ns_inside.csv" "$R/smi_apps_ns_outside.csv"
tail -25 "$R/run_ns.stderr"
}

want startup && {
part "start-up phase by phase: what NVML shows while a job imports, creates its context, copies, launches"
timeout 90 "${GM[@]}" run --price 3.00 --ledger "$R/ledger_startup.db" --json-report "$R/run_startup.json" -- \
  "$PY" scripts/gpu_check/startup_probe.py --out "$R/job_startup.json" 2>"$R/run_startup.stderr"
echo "run exit $?"
tail -12 "$R/run_startup.stderr"
}

want startup_train && {
part "start-up of the training job with NVML polled every 0.1 s"
timeout 90 "${GM[@]}" run --price 3.00 --ledger "$R/ledger_startup_train.db" --json-report "$R/run_startup_train.json" -- \
  "$PY" scripts/gpu_check/train.py --precision bf16 --seconds 8 --nvml-poll --out "$R/job_startup_train.json" 2>"$R/run_startup_train.stderr"
echo "run exit $?"
tail -12 "$R/run_startup_train.stderr"
}

want trace && {
part "profiler traces: an input-bound DataLoader (0 workers) and a healthy one (4 pinned workers)"
for w in 0 4; do
  timeout 90 "$PY" scripts/gpu_check/trace_input.py --workers $w --out "$R/trace_w$w" >"$R/trace_w$w.log" 2>&1
  echo "trace workers=$w exit $?"
  for t in "$R"/trace_w$w/*.pt.trace.json.gz; do
    [ -e "$t" ] && timeout 60 "${GM[@]}" trace "$t" --price 3.00 --no-progress >"$R/trace_w$w.txt" 2>&1
  done
  head -40 "$R/trace_w$w.txt" 2>/dev/null
done
}

want peak && {
part "peak memory of training steps (the planner's calibration set)"
timeout 90 "$PY" tests/data/plan/peak_memory.py --steps 3 --seq 1024 >"$R/peak_memory.jsonl" 2>"$R/peak_memory.err"
echo "peak_memory exit $?"
wc -l "$R/peak_memory.jsonl"
}

part "summary"
"$PY" scripts/gpu_check/summarize.py "$R" | tee "$R/summary.txt"
tar czf "$OUT/gpu_check.tar.gz" -C "$W" gpu_check
ls -la "$OUT"
