#!/usr/bin/env python3
"""A GPT-style training loop on a real GPU, for gpumeter's real-GPU check (scripts/gpu_check/run.sh).

It trains the way users do: the CPU launches each step's kernels and runs ahead of the GPU, and waits only at
`loss.item()` every --sync-every steps, so its progress comes in bursts (what made the old forecast 47 % low).
It reports every step through gpumeter's Python client (step, total steps, tokens, FLOPs per token), and writes
the truth gpumeter is checked against to --out (JSON):

- `start_unix_s`: when this process started (/proc/self/stat), `first_launch_unix_s`: when it launched its first
  GPU kernel (start-up ends there), `loop_end_unix_s`: when the last step finished on the GPU;
- `flops_per_token` (the matmul weights' 6 x N plus 12 x layers x hidden x seq), `tokens`, and the
  MFU the job measures itself: tokens x FLOPs per token / (peak x (loop end - first launch));
- `status`: what the status file said while it ran, every 0.25 s: (time, step, spent, forecast).

The total step count is set after a calibration of 10 steps, so the run lasts about --seconds on any GPU.
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import gpumeter


def process_start_unix_s():
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return btime + start_ticks / os.sysconf("SC_CLK_TCK")


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s = q.shape[-2]  # the dry run's older PyTorch
    w = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    w = w.masked_fill(torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return w.softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.o = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.up, self.down = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = attention(q, k, v)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, h))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Gpt(nn.Module):
    def __init__(self, layers, h, heads, vocab, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(h), nn.Linear(h, vocab, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def start_poller(rec):
    """NVML's utilization, memory and process count every 0.1 s, into rec["nvml"] (the start-up check)."""
    import threading

    import pynvml

    rec["nvml"] = []

    def poll():
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        while True:
            u = pynvml.nvmlDeviceGetUtilizationRates(h)
            m = pynvml.nvmlDeviceGetMemoryInfo(h)
            n = len(pynvml.nvmlDeviceGetComputeRunningProcesses(h))
            rec["nvml"].append((time.time(), u.gpu, m.used, n))
            time.sleep(0.1)

    threading.Thread(target=poll, daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--seconds", type=float, default=40)
    p.add_argument("--sync-every", type=int, default=10)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--peak-tflops", type=float, default=989.4, help="dense peak the job's own MFU divides by")
    p.add_argument("--device", default="cuda", help="cpu: a dry run of this script on a machine without a GPU")
    p.add_argument("--nvml-poll", action="store_true", help="record NVML's readings every 0.1 s and the phases")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    dev = torch.device(a.device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    rec = {"start_unix_s": process_start_unix_s(), "precision": a.precision, "status": [], "marks": []}
    if a.nvml_poll:
        start_poller(rec)

    def mark(phase):
        rec["marks"].append((time.time(), phase))

    mark("arguments parsed")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    vocab, heads = 32000, a.hidden // 64
    model = Gpt(a.layers, a.hidden, heads, vocab, a.seq)
    mark("model built on the CPU")
    model = model.to(dev)
    sync()
    mark("model moved to the GPU")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if dev.type == "cuda" else {}))
    matmul_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    fpt = 6 * matmul_params + 12 * a.layers * a.hidden * a.seq
    tokens_per_step = a.batch * a.seq
    ids = torch.randint(0, vocab, (a.batch, a.seq + 1), device=dev)
    x, y = ids[:, :-1], ids[:, 1:]
    sync()
    mark("optimizer and batch ready")

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    last_status = [0.0]

    def report(i, total, loss=None):
        metrics = {"loss": loss} if loss is not None else None
        gpumeter.progress(step=i, total_steps=total, tokens=i * tokens_per_step, flops_per_token=fpt, metrics=metrics)
        now = time.time()
        if now - last_status[0] >= 0.25:
            last_status[0] = now
            s = gpumeter.status() or {}
            rec["status"].append([now, s.get("step"), s.get("spent_usd"), s.get("forecast_usd")])

    rec["first_launch_unix_s"] = time.time()
    i, warm, calib = 0, 10, 10
    while i < warm:  # start-up: kernel selection, allocator growth
        step()
        i += 1
        report(i, None)
    sync()
    t0 = time.time()
    while i < warm + calib:
        step()
        i += 1
        report(i, None)
    sync()
    s_per_step = (time.time() - t0) / calib
    total = warm + calib + max(20, int(a.seconds / s_per_step))
    rec.update(s_per_step_calibrated=s_per_step, total_steps=total)
    while i < total:
        loss = step()
        i += 1
        if i % a.sync_every == 0 or i == total:
            report(i, total, float(loss.item()))  # the sync: the CPU waits for the GPU here only
        else:
            report(i, total)
    sync()
    rec["loop_end_unix_s"] = time.time()
    rec.update(flops_per_token=fpt, tokens=total * tokens_per_step, tokens_per_step=tokens_per_step,
               matmul_params=matmul_params, steps=total, peak_tflops=a.peak_tflops,
               max_memory_allocated_bytes=torch.cuda.max_memory_allocated() if dev.type == "cuda" else None,
               max_memory_reserved_bytes=torch.cuda.max_memory_reserved() if dev.type == "cuda" else None)
    rec["job_mfu"] = rec["tokens"] * fpt / (a.peak_tflops * 1e12 * (rec["loop_end_unix_s"] - rec["first_launch_unix_s"]))
    with open(a.out, "w") as f:
        json.dump(rec, f)


if __name__ == "__main__":
    main()
