#!/usr/bin/env python3
"""Measures the peak GPU memory of training real Hugging Face transformers models, to hold `gpumeter plan`'s
peak to it (docs/accuracy.md, "On a GPU"). Needs one CUDA GPU, PyTorch 2 and transformers; downloads nothing:
each model is built from a local config.json with random weights (AutoModelForCausalLM.from_config).

The recipe is the one of the shared H200 set (tests/data/plan/peak_memory_h200.jsonl): model on the GPU (cast to
bf16 for `bf16`), train mode, torch.optim.AdamW with its defaults, `loss = model(input_ids=ids, labels=ids).loss`
(under torch.autocast("cuda", torch.bfloat16) for `mixed`), backward(), step(), zero_grad(set_to_none=True),
--steps steps on random token ids, then torch.cuda.max_memory_allocated() / max_memory_reserved().

Usage:
  measure_hf_peak.py [--configs tests/data/plan/hf_configs/*.json] [--attn eager sdpa] \\
                     [--precision mixed bf16] [--batch 4] [--seq 1024] [--steps 3] [--gpumeter build/gpumeter]
One JSON line per configuration (the first names the device, driver, torch and transformers):
  {"model", "config", "attn", "precision", "batch", "seq", "params", "peak_allocated_bytes",
   "peak_reserved_bytes", "plan_args"[, "planned_peak_bytes", "ratio"]}
With --gpumeter, each line also has the plan's peak (`memory.peak_bytes` of `plan ... --json`) and the ratio
planned / measured. A configuration that runs out of memory is reported with "oom": true.
"""
import argparse
import glob
import json
import os
import subprocess
import sys


def plan_args(config, attn, precision, batch, seq):
    return ["plan", "--model", config, "--task", "train", "--precision", precision, "--attention", attn,
            "--recompute", "none", "--optimizer", "adamw", "--batch", str(batch), "--seq", str(seq),
            "--gpus", "1", "--json"]


def measure(torch, transformers, config_path, attn, precision, batch, seq, steps):
    cfg = transformers.AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(config_path))
                                                  if os.path.basename(config_path) == "config.json"
                                                  else config_path)
    if hasattr(cfg, "text_config") and getattr(cfg, "text_config", None) is not None:
        cfg = cfg.text_config  # the language model of a multimodal config
    cfg._attn_implementation = attn
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn).cuda()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    opt = torch.optim.AdamW(model.parameters())
    vocab = cfg.vocab_size
    out = {"params": sum(p.numel() for p in model.parameters())}
    try:
        for _ in range(steps):
            ids = torch.randint(0, vocab, (batch, seq), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "mixed"):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    except torch.cuda.OutOfMemoryError:
        out["oom"] = True
    del model, opt
    torch.cuda.empty_cache()
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_configs = sorted(glob.glob(os.path.join(here, "..", "data", "plan", "hf_configs", "*.json")))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=default_configs, help="config.json files (any name)")
    ap.add_argument("--attn", nargs="+", default=["eager", "sdpa"], choices=["eager", "sdpa", "flash_attention_2"])
    ap.add_argument("--precision", nargs="+", default=["mixed", "bf16"], choices=["mixed", "bf16"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--gpumeter", help="path of the gpumeter binary: add the plan's peak and the ratio")
    args = ap.parse_args()

    import torch
    import transformers
    if not torch.cuda.is_available():
        sys.exit("measure_hf_peak.py: no CUDA GPU")
    driver = ""
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        pass
    print(json.dumps({"device": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
                      "transformers": transformers.__version__}), flush=True)
    for config in args.configs:
        name = os.path.splitext(os.path.basename(config))[0]
        if name == "config":
            name = os.path.basename(os.path.dirname(os.path.abspath(config)))
        for attn in args.attn:
            for precision in args.precision:
                line = {"model": name, "config": config, "attn": attn, "precision": precision,
                        "batch": args.batch, "seq": args.seq}
                line.update(measure(torch, transformers, config, attn, precision, args.batch, args.seq, args.steps))
                plan_attn = "flash" if attn == "flash_attention_2" else attn
                line["plan_args"] = plan_args(config, plan_attn, precision, args.batch, args.seq)
                if args.gpumeter and "peak_allocated_bytes" in line:
                    r = subprocess.run([args.gpumeter] + line["plan_args"], capture_output=True, text=True)
                    if r.returncode == 0:
                        planned = json.loads(r.stdout)["memory"]["peak_bytes"]
                        line["planned_peak_bytes"] = planned
                        line["ratio"] = round(planned / line["peak_allocated_bytes"], 4)
                    else:
                        line["plan_error"] = r.stderr.strip()
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
