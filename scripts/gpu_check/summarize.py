#!/usr/bin/env python3
"""Reads the folder scripts/gpu_check/run.sh filled on a GPU machine and prints each check's figures next to
the truth it is checked against (the job's own clocks and counts, nvidia-smi, NVML's energy counter).

Usage: summarize.py FOLDER
"""
import csv
import json
import pathlib
import sys

R = pathlib.Path(sys.argv[1])


def load(name):
    try:
        return json.loads((R / name).read_text())
    except (OSError, ValueError) as e:
        print(f"  {name}: not readable ({e})")
        return None


def smi(name):
    try:
        rows = list(csv.reader((R / name).read_text().splitlines()))
    except OSError:
        return []
    head = [h.strip().split(" [")[0] for h in rows[0]]
    return [dict(zip(head, (c.strip() for c in r))) for r in rows[1:]]


def pct(x):
    return "n/a" if x is None else f"{x:+.1f} %"


def identity():
    print("identity (idle GPU): gpumeter gpus --json against nvidia-smi")
    g = load("gpus_idle.json")
    s = smi("smi_idle.csv")
    if not g or not s:
        return
    d, m = g["devices"][0], s[0]
    mib = d["memory_total_bytes"] / 2**20
    print(f"  name        {d['name']!r} | {m['name']!r}")
    print(f"  uuid        {d['uuid'] == m['uuid']} ({d['uuid']})")
    print(f"  pci bus id  {d['pci_bus_id']} | {m['pci.bus_id']}")
    print(f"  memory MiB  {mib:.0f} | {m['memory.total']}")
    print(f"  temperature {d['temperature_c']} | {m['temperature.gpu']};  power W {d['power_w']} | {m['power.draw']}")
    b, apps = load("gpus_busy.json"), smi("smi_apps.csv")
    if b:
        bd = b["devices"][0]
        procs = {p["pid"]: p["memory_bytes"] / 2**20 for p in bd.get("processes", [])}
        print(f"  busy: util {bd['utilization_pct']} % | {smi('smi_busy.csv')[0].get('utilization.gpu') if smi('smi_busy.csv') else '?'};"
              f" tensor {bd.get('tensor_active_pct')} %, sm {bd.get('sm_active_pct')} %")
        for a in apps:
            pid = int(a["pid"])
            print(f"  process {pid}: gpumeter {procs.get(pid, 'absent')} MiB | nvidia-smi {a.get('used_gpu_memory', a.get('used_memory'))}")


def run(tag, energy=False):
    print(f"run {tag}:")
    rep, job = load(f"run_{tag}.json"), load(f"job_{tag}.json")
    if not rep or not job:
        return
    startup_truth = job["first_launch_unix_s"] - job["start_unix_s"]
    gpus = rep.get("gpus") or [{}]
    g = gpus[0]
    print(f"  status {rep['status']}, wall {rep['wall_s']:.1f} s, cost ${rep['cost_usd']:.6f}, steps {rep.get('steps')}/{job['steps']},"
          f" gpus used {rep.get('gpus_used')}")
    print(f"  start-up: gpumeter startup_s {rep.get('startup_s')} (process on GPU {rep.get('process_on_gpu_s')});"
          f" the job's first kernel at {startup_truth:.2f} s after its start")
    if rep.get("mfu") is not None:
        print(f"  MFU: gpumeter {rep['mfu']:.4f} | the job's own {job['job_mfu']:.4f} ({pct(100 * (rep['mfu'] / job['job_mfu'] - 1))});"
              f" basis {rep.get('mfu_basis')}")
    else:
        print(f"  MFU: none; the job's own {job['job_mfu']:.4f}")
    keys = ["util_avg_pct", "util_peak_pct", "busy_s", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "fp32_active_pct",
            "fp16_active_pct", "dram_bw_util_pct", "memory_peak_bytes"]
    print("  GPU: " + ", ".join(f"{k} {g.get(k)}" for k in keys if k in g))
    if job.get("max_memory_reserved_bytes"):
        print(f"  torch max reserved {job['max_memory_reserved_bytes'] / 2**30:.2f} GiB, allocated {job['max_memory_allocated_bytes'] / 2**30:.2f} GiB")
    print("  findings: " + ", ".join(f.get("kind", f.get("id", "?")) for f in rep.get("findings", []) or []))
    for n in rep.get("notes", []) or []:
        print(f"  note: {n}")
    final = rep["cost_usd"]
    snaps = [s for s in job["status"] if s[1] is not None]
    total = job["steps"]
    for frac in (0.25, 0.5, 0.75):
        at = next((s for s in snaps if s[1] >= frac * total and s[3] is not None), None)
        if at:
            print(f"  forecast at {100 * at[1] / total:.0f} % of the steps: ${at[3]:.6f} against the final ${final:.6f} ({pct(100 * (at[3] / final - 1))})")
        else:
            print(f"  forecast at {100 * frac:.0f} %: none")
    first = next((s for s in snaps if s[3] is not None), None)
    if first:
        print(f"  first forecast at step {first[1]} of {total} ({100 * first[1] / total:.0f} %), {pct(100 * (first[3] / final - 1))}")
    if energy:
        try:
            lines = (R / "energy_mj.txt").read_text().split("\n")
            (t0, e0), (t1, e1) = [tuple(map(float, x.split())) for x in lines[:2]]
            counter_kwh = (e1 - e0) / 3.6e9
            print(f"  energy: gpumeter {rep.get('energy_kwh')} kWh ({rep.get('energy_method')}) | NVML counter around the run"
                  f" {counter_kwh:.6f} kWh over {t1 - t0:.1f} s (wall {rep['wall_s']:.1f} s)"
                  f" ({pct(100 * (rep['energy_kwh'] / counter_kwh - 1)) if rep.get('energy_kwh') else 'n/a'})")
        except (OSError, ValueError) as e:
            print(f"  energy: not readable ({e})")


def traces():
    for w in (0, 4):
        p = R / f"trace_w{w}.txt"
        print(f"trace, DataLoader workers={w}:")
        if not p.exists():
            print("  none")
            continue
        for line in p.read_text().splitlines():
            if line.startswith("kernel ") or line.startswith("─"):
                break
            if line.strip() and not line.startswith("price:"):
                print("  " + line[:220])


def peaks():
    p = R / "peak_memory.jsonl"
    if p.exists():
        print(f"peak memory: {len(p.read_text().splitlines())} lines in {p.name}")


identity()
run("bf16", energy=True)
run("fp32")
run("ns")
traces()
peaks()
