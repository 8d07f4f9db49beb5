#!/usr/bin/env python3
"""What NVML shows during a PyTorch job's start-up, phase by phase, for gpumeter's real-GPU check
(scripts/gpu_check/run.sh, part `startup`): each phase is followed by 3 s of nothing, and a thread polls NVML
(utilization, GPM-free) every 0.1 s, so every utilization reading can be laid against what the job was doing.
Writes --out (JSON): `marks` [(unix s, phase)] and `nvml` [(unix s, utilization %, memory used bytes, processes)].
"""
import argparse
import json
import threading
import time

import pynvml

marks, polls = [], []
stop = threading.Event()


def mark(phase):
    marks.append((time.time(), phase))


def poll():
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    while not stop.is_set():
        u = pynvml.nvmlDeviceGetUtilizationRates(h)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        n = len(pynvml.nvmlDeviceGetComputeRunningProcesses(h))
        polls.append((time.time(), u.gpu, m.used, n))
        time.sleep(0.1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    threading.Thread(target=poll, daemon=True).start()
    mark("start")
    import torch
    import torch.nn as nn
    mark("import torch")
    time.sleep(3)
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    mark("CUDA context")
    time.sleep(3)
    host = torch.empty(512 << 20, dtype=torch.float32).fill_(1.0)  # 2 GiB on the host
    mark("host tensor filled")
    dev = host.cuda()
    torch.cuda.synchronize()
    mark("2 GiB copied to the GPU")
    time.sleep(3)
    model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)])
    mark("model built on the CPU")
    model = model.cuda()
    torch.cuda.synchronize()
    mark("model moved to the GPU")
    time.sleep(3)
    x = torch.randn(64, 4096, device="cuda")
    torch.cuda.synchronize()
    mark("one small kernel")
    time.sleep(3)
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(8192, 4096, device="cuda")
    mark("training starts")
    t_end = time.time() + 6
    step = 0
    while time.time() < t_end:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 10 == 0:
            loss.item()
    torch.cuda.synchronize()
    mark(f"training ends ({step} steps)")
    del dev
    time.sleep(1)
    stop.set()
    time.sleep(0.2)
    with open(a.out, "w") as f:
        json.dump({"marks": marks, "nvml": polls}, f)


if __name__ == "__main__":
    main()
