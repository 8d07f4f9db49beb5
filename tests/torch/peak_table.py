#!/usr/bin/env python3
"""Prints the docs/accuracy.md table of the plan's training peak against max_memory_allocated() measured on a
GPU: the shared H200 set (Hugging Face models, planned from tests/data/plan/hf_configs/) and peak_memory.py's
own models (planned from tests/data/plan/peak_memory_models/, what the script says it builds).

Usage: peak_table.py GPUMETER_BINARY
"""
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DATA = os.path.join(ROOT, "tests", "data", "plan")


def planned(binary, model, line, attn, keep_logits):
    args = [binary, "plan", "--model", model, "--task", "train", "--precision", line["precision"], "--attention",
            attn, "--recompute", "none", "--optimizer", "adamw", "--batch", str(line["batch"]), "--seq",
            str(line["seq"]), "--gpus", "1", "--json"] + (["--keep-logits"] if keep_logits else [])
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["memory"]


def rows(binary, file, model_path, attn_of, keep_logits, what):
    out = []
    with open(os.path.join(DATA, file)) as f:
        for text in f:
            line = json.loads(text)
            if "peak_allocated_bytes" not in line:
                continue
            mem = planned(binary, model_path(line["model"]), line, attn_of(line), keep_logits)
            real = line["peak_allocated_bytes"]
            out.append((what, line["model"], attn_of(line), line["precision"], line["batch"], line["seq"], real,
                        mem["peak_bytes"], mem["peak"]["phase"]))
    return out


def main():
    binary = sys.argv[1]
    table = rows(binary, "peak_memory_h200.jsonl",
                 lambda m: os.path.join(DATA, "hf_configs", m + ".json"), lambda l: l["attn"], False,
                 "Hugging Face (config.json)")
    table += rows(binary, "peak_memory_project_script_h200.jsonl",
                  lambda m: os.path.join(DATA, "peak_memory_models", m + ".toml"), lambda l: "eager", True,
                  "peak_memory.py (--describe)")
    print("| built by | model | attention | precision | batch × seq | measured GB | planned GB | difference "
          "| peak at |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for what, model, attn, prec, b, s, real, plan, phase in table:
        diff = plan / real - 1
        worst = max(worst, abs(diff))
        print(f"| {what} | {model} | {attn} | {prec} | {b} × {s} | {real / 1e9:.2f} | {plan / 1e9:.2f} | "
              f"{diff * 100:+.1f} % | {phase} |")
    print(f"\nLargest difference: {worst * 100:.1f} % over {len(table)} configurations")


if __name__ == "__main__":
    main()
