#!/usr/bin/python3
"""Measures, on the CPU, the memory terms that `gpumeter plan` estimates for training: weights,
gradients, AdamW states and the activations kept for the backward pass, with real PyTorch.

The models are built here from their shapes (random weights, no downloads), written the way an eager
PyTorch training script (e.g. Hugging Face transformers' eager attention) writes them:

  gpt:   GPT-2 layer: LayerNorm, fused QKV projection, explicit causal attention (scores, softmax,
         dropout 0.1 on the probabilities and on both residual branches), tanh-GELU MLP, tied head.
  llama: Llama layer: RMSNorm computed in fp32, rotary embeddings, grouped-query attention with the
         key/value heads repeated, softmax in fp32, no dropout, SwiGLU MLP.

The loss is cross-entropy on `logits.float()`. No activation recomputation.

What is counted:
  weights_bytes      unique parameter storages (tied embeddings once)
  gradients_bytes    the .grad of every parameter after backward()
  optimizer_bytes    AdamW state tensors after one step (exp_avg, exp_avg_sq, step)
  activations_bytes  every tensor autograd saved for backward during the forward pass and the loss,
                     seen through torch.autograd.graph.saved_tensors_hooks, counted once per storage
                     (views of one tensor count once; parameters and buffers are not activations)

Dropout goes through torch.native_dropout, the kernel PyTorch uses on CUDA, which keeps a 1-byte bool
mask; F.dropout on the CPU takes another path that keeps a mask in the activations' dtype.

Usage:
  measure_memory.py --set test|bench|all          one JSON line per configuration
  measure_memory.py --model gpt2 --seq 128 --batch 2 --precision fp32 [--layers N]
Each line has "plan_args": the `gpumeter plan` flags describing the same configuration.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

# name: style, layers, hidden, heads, kv_heads, ffn, vocab, native seq, tied, qkv_bias
# (rows of gpumeter's data/models.csv, and TinyLlama-1.1B's config.json: a Llama-2 architecture with
# grouped-query attention, given to plan with --layers/--hidden/--heads/--kv-heads/--ffn/--vocab)
SHAPES = {
    "gpt2": ("gpt", 12, 768, 12, 12, 3072, 50257, 1024, True, True),
    "gpt2-medium": ("gpt", 24, 1024, 16, 16, 4096, 50257, 1024, True, True),
    "qwen2.5-0.5b": ("llama", 24, 896, 14, 2, 4864, 151936, 32768, True, True),
    "tinyllama-1.1b": ("llama", 22, 2048, 32, 4, 5632, 32000, 2048, False, False),
}
TABLE_MODELS = ("gpt2", "gpt2-medium", "qwen2.5-0.5b")  # the others go to plan as --layers/--hidden/...

# (model, layers kept or None for all, seq, batch, precision). Activations per layer do not depend on the
# number of layers, so Llama-shaped models keep a few of their layers to stay quick on a CPU.
SETS = {
    "test": [
        ("gpt2", None, 64, 2, "fp32"),
        ("gpt2", None, 128, 4, "bf16"),
        ("tinyllama-1.1b", 2, 64, 2, "fp32"),
        ("qwen2.5-0.5b", 2, 128, 2, "bf16"),
    ],
    "bench": [
        ("gpt2", None, 512, 1, "fp32"),
        ("gpt2", None, 256, 4, "fp32"),
        ("gpt2", None, 256, 4, "bf16"),
        ("gpt2-medium", None, 256, 2, "fp32"),
        ("gpt2-medium", None, 256, 2, "bf16"),
        ("gpt2-medium", None, 512, 4, "bf16"),
        ("qwen2.5-0.5b", None, 256, 1, "bf16"),
        ("qwen2.5-0.5b", 6, 256, 2, "fp32"),
        ("tinyllama-1.1b", 4, 512, 1, "fp32"),
        ("tinyllama-1.1b", 4, 256, 2, "bf16"),
        ("tinyllama-1.1b", 4, 1024, 2, "bf16"),
    ],
}
SETS["all"] = SETS["test"] + SETS["bench"]

_region = ["other"]


def region(name):
    _region[0] = name


def dropout(x, p, training):
    if not training or p == 0:
        return x
    return torch.native_dropout(x, p, True)[0]


class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class GptBlock(nn.Module):
    def __init__(self, h, a, f, p):
        super().__init__()
        self.a, self.d, self.p = a, h // a, p
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.fc_out = nn.Linear(h, f), nn.Linear(f, h)

    def forward(self, x, causal):
        b, s, h = x.shape
        region("layer.norm")
        y = self.ln1(x)
        region("layer.attention")
        q, k, v = self.qkv(y).split(h, dim=2)
        q, k, v = (t.view(b, s, self.a, self.d).transpose(1, 2) for t in (q, k, v))
        region("layer.attention_scores")
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.d))
        scores = scores.masked_fill(causal[:s, :s], float("-inf"))
        probs = dropout(torch.softmax(scores, dim=-1), self.p, self.training)
        ctx = probs @ v
        region("layer.attention")
        ctx = ctx.transpose(1, 2).reshape(b, s, h)
        x = x + dropout(self.proj(ctx), self.p, self.training)
        region("layer.norm")
        y = self.ln2(x)
        region("layer.mlp")
        m = self.fc_out(F.gelu(self.fc(y), approximate="tanh"))
        return x + dropout(m, self.p, self.training)


class LlamaBlock(nn.Module):
    def __init__(self, h, a, kv, f, qkv_bias):
        super().__init__()
        self.a, self.kv, self.d = a, kv, h // a
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.q = nn.Linear(h, h, bias=qkv_bias)
        self.k = nn.Linear(h, kv * self.d, bias=qkv_bias)
        self.v = nn.Linear(h, kv * self.d, bias=qkv_bias)
        self.o = nn.Linear(h, h, bias=False)
        self.gate, self.up = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
        self.down = nn.Linear(f, h, bias=False)

    def repeat_kv(self, t):
        b, kv, s, d = t.shape
        rep = self.a // kv
        if rep == 1:
            return t
        return t[:, :, None, :, :].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)

    def forward(self, x, cos, sin, mask):
        b, s, h = x.shape
        region("layer.norm")
        y = self.n1(x)
        region("layer.attention")
        q = self.q(y).view(b, s, self.a, self.d).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(y).view(b, s, self.kv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = self.repeat_kv(k), self.repeat_kv(v)
        region("layer.attention_scores")
        scores = (q @ k.transpose(2, 3)) / math.sqrt(self.d) + mask
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        ctx = probs @ v
        region("layer.attention")
        x = x + self.o(ctx.transpose(1, 2).reshape(b, s, h))
        region("layer.norm")
        y = self.n2(x)
        region("layer.mlp")
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Model(nn.Module):
    def __init__(self, style, layers, h, a, kv, f, vocab, native_seq, tied, qkv_bias):
        super().__init__()
        self.style, self.d = style, h // a
        self.emb = nn.Embedding(vocab, h)
        if style == "gpt":
            self.pos = nn.Embedding(native_seq, h)
            self.blocks = nn.ModuleList(GptBlock(h, a, f, 0.1) for _ in range(layers))
            self.norm = nn.LayerNorm(h)
            self.register_buffer("causal", torch.ones(native_seq, native_seq, dtype=torch.bool).triu(1),
                                 persistent=False)
        else:
            self.blocks = nn.ModuleList(LlamaBlock(h, a, kv, f, qkv_bias) for _ in range(layers))
            self.norm = RMSNorm(h)
        self.head = nn.Linear(h, vocab, bias=False)
        if tied:
            self.head.weight = self.emb.weight

    def forward(self, ids):
        b, s = ids.shape
        region("embedding")
        x = self.emb(ids)
        if self.style == "gpt":
            x = dropout(x + self.pos(torch.arange(s)), 0.1, self.training)
            for blk in self.blocks:
                x = blk(x, self.causal)
        else:
            inv = 1.0 / (10000.0 ** (torch.arange(0, self.d, 2).float() / self.d))
            ang = torch.outer(torch.arange(s).float(), inv)
            ang = torch.cat((ang, ang), dim=-1)
            cos, sin = ang.cos().to(x.dtype)[None, None], ang.sin().to(x.dtype)[None, None]
            mask = torch.full((s, s), float("-inf")).triu(1).to(x.dtype)[None, None]
            for blk in self.blocks:
                x = blk(x, cos, sin, mask)
        region("head")
        return self.head(self.norm(x))


def storage_of(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def measure(name, layers, seq, batch, precision):
    style, L, h, a, kv, f, vocab, native, tied, qkv_bias = SHAPES[name]
    if layers:
        L = layers
    torch.manual_seed(0)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    model = Model(style, L, h, a, kv, f, vocab, native, tied, qkv_bias).to(dtype).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    state_ptrs = {storage_of(t).data_ptr() for t in list(model.parameters()) + list(model.buffers())}

    saved = {}  # storage pointer -> (bytes, region, dtype)

    def pack(t):
        st = storage_of(t)
        ptr = st.data_ptr()
        if ptr not in state_ptrs and ptr not in saved:
            saved[ptr] = (st.nbytes(), _region[0], str(t.dtype).replace("torch.", ""))
        return t

    t0 = time.time()
    ids = torch.randint(0, vocab, (batch, seq))
    targets = torch.randint(0, vocab, (batch, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(ids)
        region("loss")
        loss = F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))
    activations = sum(v[0] for v in saved.values())
    by_region, by_dtype = defaultdict(int), defaultdict(int)
    for nbytes, reg, dt in saved.values():
        by_region[reg] += nbytes
        by_dtype[dt] += nbytes
    del logits, loss
    saved.clear()
    # Gradients and AdamW states do not depend on the input size: one step on a short input measures
    # them without paying for a full-size backward pass.
    ids = torch.randint(0, vocab, (1, min(seq, 8)))
    F.cross_entropy(model(ids).float().view(-1, vocab), ids.view(-1)).backward()
    opt.step()

    params = {storage_of(p).data_ptr(): p for p in model.parameters()}
    weights = sum(p.numel() * p.element_size() for p in params.values())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params.values() if p.grad is not None)
    states = 0
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v):
                states += v.numel() * v.element_size()
    plan_args = ["--task", "train", "--precision", precision, "--recompute", "none", "--attention", "eager",
                 "--seq", str(seq), "--batch", str(batch), "--optimizer", "adamw"]
    if style == "gpt":
        # The GPT layers here run one GELU kernel; the table's GPT-2 is Hugging Face's (gelu_new as Python
        # operations), so plan gets a model file saying what is built.
        model_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", name + ".toml")
        plan_args = ["--model-file", model_file] + (["--layers", str(L)] if layers else []) + plan_args
    elif name in TABLE_MODELS:
        plan_args = ["--model", name] + (["--layers", str(L)] if layers else []) + plan_args
    else:
        plan_args = ["--layers", str(L), "--hidden", str(h), "--heads", str(a), "--kv-heads", str(kv), "--ffn",
                     str(f), "--vocab", str(vocab)] + plan_args
    return {
        "model": name, "style": style, "layers": L, "seq": seq, "batch": batch, "precision": precision,
        "params": sum(p.numel() for p in params.values()),
        "weights_bytes": weights, "gradients_bytes": grads, "optimizer_bytes": states,
        "activations_bytes": activations,
        "activations_by_region": dict(sorted(by_region.items())),
        "activations_by_dtype": dict(sorted(by_dtype.items())),
        "plan_args": plan_args, "torch": torch.__version__, "seconds": round(time.time() - t0, 2),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", choices=sorted(SETS))
    ap.add_argument("--model", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: PyTorch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if bool(args.set) == bool(args.model):
        ap.error("give --set or --model")
    if args.model:
        print(json.dumps(measure(args.model, args.layers, args.seq, args.batch, args.precision)), flush=True)
        return 0
    # One process per configuration: the CPU allocator keeps freed memory of earlier models, which adds up
    # over a long set.
    for name, layers, seq, batch, precision in SETS[args.set]:
        cmd = [sys.executable, __file__, "--model", name, "--seq", str(seq), "--batch", str(batch), "--precision",
               precision] + (["--layers", str(layers)] if layers else []) + (["--threads", str(args.threads)]
                                                                          if args.threads else [])
        subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
