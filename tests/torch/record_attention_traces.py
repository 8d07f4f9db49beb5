#!/usr/bin/python3
"""Records the attention samples of tests/data/trace (docs/findings.md `unfused_attention`).

A small GPT-2-shaped model (2 blocks, 4 heads, 128 wide, 256 tokens, causal) is trained for a few steps on
the CPU under torch.profiler, once with attention written out (q @ k^T -> scale -> mask -> softmax -> @ v)
and once with PyTorch's scaled-dot-product attention; the two Kineto traces are written as
gpt2_attention_explicit_cpu.json.gz and gpt2_attention_sdpa_cpu.json.gz (CPU operators only).

From each CPU trace it then builds a GPU-shaped trace (gpt2_attention_*_gpu.json.gz): every operator that
launches work on a GPU (a leaf operator that is not a view or an allocation) gets a cudaLaunchKernel call
inside it and a kernel on device 0, stream 7, with the name PyTorch 2 on an A100 gives that operator (bf16
tensor-core GEMMs, the softmax warp kernels, elementwise kernels; FlashAttention's flash_fwd/flash_bwd for
the SDPA operators, which then hold the whole attention), a duration of 0.8 of the operator's CPU time,
queued in launch order. The host side is the recorded one, unchanged.

Usage: record_attention_traces.py OUT_DIR      (python3-torch; about 10 s on 2 cores)
"""
import gzip
import json
import math
import os
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

torch.manual_seed(0)
torch.set_num_threads(1)

LAYERS, HEADS, WIDTH, TOKENS, VOCAB, BATCH = 2, 4, 128, 256, 512, 2


def sdpa(q, k, v):
    """PyTorch's fused attention: the public name from 2.0, the private one in 1.13 (Debian 12)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]


class Attention(nn.Module):
    def __init__(self, fused):
        super().__init__()
        self.fused = fused
        self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
        self.c_proj = nn.Linear(WIDTH, WIDTH)
        self.register_buffer("mask", torch.tril(torch.ones(TOKENS, TOKENS, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(WIDTH, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        if self.fused:
            y = sdpa(q, k, v)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, fused):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(WIDTH), Attention(fused)
        self.ln_2, self.mlp = nn.LayerNorm(WIDTH), nn.Sequential(
            nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, fused):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(TOKENS, WIDTH)
        self.blocks = nn.ModuleList(Block(fused) for _ in range(LAYERS))
        self.ln_f, self.lm_head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def record(fused, path):
    model = GPT(fused)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, VOCAB, (BATCH, TOKENS + 1))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(4):
            loss = model(data[:, :-1], data[:, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()


NO_KERNEL = ("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::view", "aten::as_strided",
             "aten::t", "aten::transpose", "aten::permute", "aten::reshape", "aten::_reshape_alias",
             "aten::_unsafe_view", "aten::expand", "aten::detach", "aten::detach_", "aten::alias",
             "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select", "aten::split", "aten::chunk",
             "aten::narrow", "aten::resize_", "aten::lift_fresh", "aten::result_type", "aten::resolve_conj",
             "aten::resolve_neg", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::numel",
             "aten::size", "aten::stride", "aten::contiguous", "aten::to", "aten::_to_copy", "aten::split_with_sizes",
             "aten::_has_compatible_shallow_copy_type", "aten::set_", "aten::zero_", "aten::new_empty_strided")

GEMM_NT = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_nt"
GEMM_NN = "ampere_bf16_s16816gemm_bf16_64x64_ldg8_f2f_stages_64x5_nn"
FLASH_FWD = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<32, 128, 128, 4, false, false, "
             "cutlass::bfloat16_t, Flash_kernel_traits<32, 128, 128, 4, cutlass::bfloat16_t> >, false, true, "
             "false, false, true, true, false>(Flash_fwd_params)")
FLASH_BWD = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<32, 128, "
             "128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<32, 128, 128, 8, "
             "cutlass::bfloat16_t> >, true, false, false, false, true>(Flash_bwd_params)")


def kernel_name(op):
    if op in ("aten::mm", "aten::addmm"):
        return GEMM_NT
    if op in ("aten::bmm", "aten::baddbmm"):
        return GEMM_NN
    if op == "aten::_softmax":
        return ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 6, false, "
                "false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)")
    if op == "aten::_softmax_backward_data":
        return ("void (anonymous namespace)::softmax_warp_backward<c10::BFloat16, c10::BFloat16, float, 6, false, "
                "false>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, int, int, int, bool const*)")
    if "scaled_dot_product" in op:
        return FLASH_BWD if "backward" in op.lower() else FLASH_FWD
    short = op.split("::")[-1].strip("_")
    return (f"void at::native::vectorized_elementwise_kernel<4, at::native::{short}_kernel_cuda<c10::BFloat16>, "
            "at::detail::Array<char*, 3> >(int, at::native::{short}_kernel_cuda<c10::BFloat16>, "
            "at::detail::Array<char*, 3>)").replace("{short}", short)


def gpu_shaped(cpu_trace):
    """The GPU-shaped trace of a CPU one (see the module docstring)."""
    # Debian's PyTorch (no Kineto) writes the pre-Kineto event array: no categories, pid "CPU functions".
    events = [dict(e, cat=e.get("cat", "cpu_op"), pid=1) for e in
              (cpu_trace if isinstance(cpu_trace, list) else cpu_trace["traceEvents"])]
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    launchers = []
    stack = []
    for e in ops:
        while stack and (stack[-1]["tid"] != e["tid"] or stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]):
            stack.pop()
        e["_parent"] = stack[-1] if stack else None
        e["_inside_sdpa"] = any("scaled_dot_product" in s["name"] for s in stack)
        e["_launching_below"] = False
        stack.append(e)
    # Children come after their parents in this order: walking it backwards sees every child first. An
    # operator launches a kernel when it is one that computes (not a view, an allocation or a conversion)
    # and nothing below it does; an SDPA operator is one fused kernel for its whole subtree.
    for e in reversed(ops):
        if e["_inside_sdpa"]:
            continue
        computes = e["name"].startswith("aten::") and e["name"] not in NO_KERNEL
        if "scaled_dot_product" in e["name"] or (computes and not e["_launching_below"]):
            launchers.append(e)
        if (computes or e["_launching_below"]) and e["_parent"] is not None:
            e["_parent"]["_launching_below"] = True
    launchers.sort(key=lambda e: e["ts"])
    out = [{k: v for k, v in e.items() if not k.startswith("_")} for e in events]
    gpu_free = 0.0
    for n, e in enumerate(launchers, start=1):
        corr = 900000 + n
        launch_ts = round(e["ts"] + min(1.0, e["dur"] / 2), 3)
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": e["pid"], "tid": e["tid"],
                    "ts": launch_ts, "dur": 0.5, "args": {"correlation": corr, "cbid": 211}})
        start = max(launch_ts + 4.0, gpu_free)
        dur = round(max(1.0, e["dur"] * 0.8), 3)
        out.append({"ph": "X", "cat": "kernel", "name": kernel_name(e["name"]), "pid": 0, "tid": 7,
                    "ts": round(start, 3), "dur": dur,
                    "args": {"device": 0, "stream": 7, "correlation": corr, "grid": [64, 1, 1],
                             "block": [128, 1, 1]}})
        gpu_free = start + dur
    shaped = {"schemaVersion": 1, "traceEvents": out}
    shaped["deviceProperties"] = [{
        "id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42505273344, "computeMajor": 8,
        "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
        "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
        "sharedMemPerMultiprocessor": 167936, "numSms": 108, "sharedMemPerBlockOptin": 166912}]
    return shaped


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for fused, name in ((False, "explicit"), (True, "sdpa")):
        with tempfile.TemporaryDirectory() as tmp:
            raw = os.path.join(tmp, "trace.json")
            record(fused, raw)
            with open(raw) as f:
                trace = json.load(f)
        for kind, doc in (("cpu", trace), ("gpu", gpu_shaped(trace))):
            path = os.path.join(out_dir, f"gpt2_attention_{name}_{kind}.json.gz")
            with gzip.GzipFile(path, "wb", mtime=0) as f:
                f.write(json.dumps(doc, separators=(",", ":")).encode())
            print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
