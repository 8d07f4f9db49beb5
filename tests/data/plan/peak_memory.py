#!/usr/bin/env python3
"""Measures peak GPU memory of a few training steps for models of the gpumeter table, to compare with
`gpumeter plan` (docs/accuracy.md). Self-contained PyTorch (no downloads): GPT-2-style blocks (LayerNorm,
multi-head attention with explicit softmax and dropout, GELU MLP) and Llama/Qwen-style blocks (RMSNorm,
grouped-query attention, SwiGLU MLP), randomly initialised from the shapes in data/models.csv.

Usage: python3 peak_memory.py [--steps 3] > peak.jsonl
       python3 peak_memory.py --describe DIR   (no GPU needed)
Each output line: {"model", "batch", "seq", "precision", "peak_allocated_bytes", "peak_reserved_bytes"}.

--describe writes, for each model this script builds, a gpumeter model file DIR/<model>.toml saying what it
builds: the shape, its parameter count (no position embeddings), and how its layers are written (separate
q/k/v projections, plain RMSNorm or LayerNorm, softmax in the autocast/activation dtype, dropout 0.1 in the
GPT-style blocks, fused GELU or SwiGLU). Plan them with `gpumeter plan --model DIR/<model>.toml --attention
eager --recompute none --keep-logits` (the loop below holds `logits` through backward). The committed copies
are tests/data/plan/peak_memory_models/.
"""
import argparse
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {  # name: (layers, hidden, heads, kv_heads, ffn, vocab, gated, tied)
    "gpt2": (12, 768, 12, 12, 3072, 50257, False, True),
    "gpt2-medium": (24, 1024, 16, 16, 4096, 50257, False, True),
    "qwen2.5-0.5b": (24, 896, 14, 2, 4864, 151936, True, True),
}


class RMSNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.w = nn.Parameter(torch.ones(h))

    def forward(self, x):
        return self.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Block(nn.Module):
    def __init__(self, h, a, kv, f, gated):
        super().__init__()
        self.a, self.kv, self.d, self.gated = a, kv, h // a, gated
        norm = RMSNorm if gated else nn.LayerNorm
        self.n1, self.n2 = norm(h), norm(h)
        self.q = nn.Linear(h, h, bias=True)
        self.k = nn.Linear(h, kv * self.d, bias=True)
        self.v = nn.Linear(h, kv * self.d, bias=True)
        self.o = nn.Linear(h, h, bias=not gated)
        if gated:
            self.gate, self.up, self.down = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False), nn.Linear(f, h, bias=False)
        else:
            self.up, self.down = nn.Linear(h, f), nn.Linear(f, h)
        self.drop = 0.0 if gated else 0.1

    def forward(self, x):
        b, s, h = x.shape
        y = self.n1(x)
        q = self.q(y).view(b, s, self.a, self.d).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv, self.d).transpose(1, 2).repeat_interleave(self.a // self.kv, dim=1)
        v = self.v(y).view(b, s, self.kv, self.d).transpose(1, 2).repeat_interleave(self.a // self.kv, dim=1)
        # Explicit attention (scores and softmax kept for backward, as Korthikanti et al. count them).
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.d)
        mask = torch.ones(s, s, device=x.device, dtype=torch.bool).triu(1)
        p = F.dropout(scores.masked_fill(mask, float("-inf")).softmax(-1), self.drop, self.training)
        x = x + F.dropout(self.o((p @ v).transpose(1, 2).reshape(b, s, h)), self.drop, self.training)
        y = self.n2(x)
        m = self.down(F.silu(self.gate(y)) * self.up(y)) if self.gated else self.down(F.gelu(self.up(y)))
        return x + F.dropout(m, self.drop, self.training)


class Model(nn.Module):
    def __init__(self, layers, h, a, kv, f, vocab, gated, tied):
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(Block(h, a, kv, f, gated) for _ in range(layers))
        self.norm = RMSNorm(h) if gated else nn.LayerNorm(h)
        self.head = nn.Linear(h, vocab, bias=False)
        if tied:
            self.head.weight = self.emb.weight

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def measure(name, batch, seq, precision, steps):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = Model(*SHAPES[name]).cuda().to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    vocab = SHAPES[name][5]
    for _ in range(steps):
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "mixed"):
            logits = model(ids)
        loss = F.cross_entropy(logits.float().view(-1, vocab), ids.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    out = {"model": name, "batch": batch, "seq": seq, "precision": precision,
           "params": sum(p.numel() for p in model.parameters()),
           "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
           "peak_reserved_bytes": torch.cuda.max_memory_reserved()}
    del model, opt
    return out


def param_count(layers, h, a, kv, f, vocab, gated, tied):
    """Parameters of Model(...) without building it (the same sum as sum(p.numel()))."""
    d = h // a
    attn = h * h + h + 2 * (h * kv * d + kv * d) + h * h + (0 if gated else h)
    mlp = 3 * h * f if gated else h * f + f + f * h + h
    norms = 2 * h if gated else 4 * h
    final = h if gated else 2 * h
    return layers * (attn + mlp + norms) + vocab * h * (1 if tied else 2) + final


def describe(directory):
    import os
    os.makedirs(directory, exist_ok=True)
    for name, (layers, h, a, kv, f, vocab, gated, tied) in SHAPES.items():
        lines = [
            f'name = "{name} (peak_memory.py)"',
            'source = "tests/data/plan/peak_memory.py --describe: the model the script builds"',
            f"params = {param_count(layers, h, a, kv, f, vocab, gated, tied)}",
            f"layers = {layers}", f"hidden = {h}", f"heads = {a}", f"kv_heads = {kv}", f"ffn = {f}",
            f"vocab = {vocab}", "seq = 1024", f"gated_mlp = {str(gated).lower()}",
            f"tied_embeddings = {str(tied).lower()}", "qkv_bias = true",
            f'norm = "{"rmsnorm" if gated else "layernorm"}"',
            "softmax_fp32 = false", "fused_qkv = false",
            f'mlp_activation = "{"gated" if gated else "gelu"}"',
            f"attention_dropout = {0.0 if gated else 0.1}", f"hidden_dropout = {0.0 if gated else 0.1}",
            "embedding_dropout = 0.0",
        ]
        with open(os.path.join(directory, name + ".toml"), "w") as out:
            out.write("# Written by tests/data/plan/peak_memory.py --describe\n" + "\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--describe", metavar="DIR", help="write gpumeter model files of what this script builds")
    args = ap.parse_args()
    if args.describe:
        describe(args.describe)
        return
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    for name in SHAPES:
        for batch in (4, 8):
            for precision in ("mixed", "bf16"):
                print(json.dumps(measure(name, batch, args.seq, precision, args.steps)), flush=True)


if __name__ == "__main__":
    main()
