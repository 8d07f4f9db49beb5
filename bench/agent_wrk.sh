#!/bin/sh
# Load benchmark of `gpumeter agent`: 8 fake GPUs x 200 processes (fake NVML + fake /proc), wrk on /metrics,
# the agent's CPU per second of wall time idle (1 s interval) and under load, RSS before and after.
# With GUARD=1 the agent also runs its node guard: preemption polling every 5 s of a stand-in AWS metadata
# service (bench/metadata_standin.py), autostop (never due: the GPUs are busy) and a node and an owner budget.
# Usage: [GUARD=1] [IDLE_SECONDS=20] bench/agent_wrk.sh [BUILD_DIR] [WRK_SECONDS]
set -eu
build="${1:-build}"
secs="${2:-30}"
tmp=$(mktemp -d /tmp/gpumeter-bench-XXXXXX)
mdpid=""
trap 'kill $agent $mdpid 2>/dev/null; rm -rf "$tmp"' EXIT
guard_flags=""
if [ "${GUARD:-0}" = 1 ]; then
  python3 "$(dirname "$0")/metadata_standin.py" >"$tmp/md.port" &
  mdpid=$!
  while [ ! -s "$tmp/md.port" ]; do sleep 0.1; done
  guard_flags="--preemption aws --metadata-url http://127.0.0.1:$(cat "$tmp/md.port") --preemption-poll 5s
    --autostop-idle 1h --autostop-command true --node-budget 1000/day --owner-budget user:root=100/day"
fi
python3 - "$tmp" <<'PY'
import json, os, sys
root = sys.argv[1]
devices = []
for g in range(8):
    procs = []
    for i in range(200):
        pid = 10000 + g * 200 + i
        d = f"{root}/proc/{pid}"
        os.makedirs(d)
        if i % 4 == 0:
            uid = f"0d3c8b2e-1f4a-4b6c-9d8e-{g:04d}{i:08d}"
            cg = f"0::/kubepods/burstable/pod{uid}/{'%064x' % pid}\n"
            os.makedirs(f"{root}/pods/ns{i % 20}_pod{g}-{i}_{uid}/main", exist_ok=True)
        elif i % 4 == 1:
            cg = f"4:memory:/slurm/uid_0/job_{g * 1000 + i}/step_0\n"
        elif i % 4 == 2:
            cg = f"0::/system.slice/docker-{'%064x' % pid}.scope\n"
        else:
            cg = "0::/system.slice/worker.service\n"
        open(f"{d}/stat", "w").write(f"{pid} (python3) S 1 1 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7 0 0\n")
        open(f"{d}/comm", "w").write("python3\n")
        open(f"{d}/status", "w").write("Name:\tpython3\nUid:\t0\t0\t0\t0\n")
        open(f"{d}/cgroup", "w").write(cg)
        procs.append({"pid": pid, "mem_mib": 100 + i, "sm_util": i % 50})
    devices.append({"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-bench-{g}", "memory_total_mib": 81559,
                    "energy_counter": True, "timeline": [{"t": 0, "util": 90, "mem_used_mib": 60000,
                    "power_w": 600, "temp_c": 70, "processes": procs}]})
json.dump({"devices": devices}, open(f"{root}/scenario.json", "w"))
PY
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
GPUMETER_NVML_LIBRARY="$build/fake_nvml/libnvidia-ml.so.1" FAKE_NVML_SCENARIO="$tmp/scenario.json" \
  "$build/gpumeter" agent --listen "127.0.0.1:$port" --interval 1s --price 3 --proc-root "$tmp/proc" \
  --pod-log-root "$tmp/pods" --container-log-root "$tmp/none" $guard_flags 2>"$tmp/agent.err" &
agent=$!
sleep 3
curl -s "http://127.0.0.1:$port/metrics" | grep "^gpumeter_agent_collection"
rss() { awk '/VmRSS/ {print $2 " kB"}' "/proc/$agent/status"; }
ticks() { awk '{print $14 + $15}' "/proc/$agent/stat"; }
hz=$(getconf CLK_TCK)
echo "series: $(curl -s "http://127.0.0.1:$port/metrics" | grep -vc '^#') lines, $(curl -s "http://127.0.0.1:$port/metrics" | wc -c) bytes"
echo "RSS before: $(rss)"
idle=${IDLE_SECONDS:-20}
t0=$(ticks); sleep "$idle"; t1=$(ticks)
echo "CPU idle (1 s interval, 8 GPUs x 200 processes, ${idle} s): $(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v s="$idle" 'BEGIN { printf "%.3f %% of one core (%d ticks)", (b - a) / hz / s * 100, b - a }')"
t0=$(ticks)
wrk -t2 -c8 -d"${secs}s" --latency "http://127.0.0.1:$port/metrics" | tee "$tmp/wrk.txt"
t1=$(ticks)
echo "CPU under wrk: $(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v s="$secs" 'BEGIN { printf "%.1f %% of one core", (b - a) / hz / s * 100 }')"
echo "RSS after: $(rss)"
