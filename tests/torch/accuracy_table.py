#!/usr/bin/python3
"""Markdown table of measured (measure_memory.py output) vs planned (`gpumeter plan --json`) memory terms.

Usage: accuracy_table.py GPUMETER MEASURED.jsonl
"""
import json
import subprocess
import sys

TERMS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    gpumeter, measured = sys.argv[1], sys.argv[2]
    print("| model | layers | seq | batch | precision | weights GB | gradients GB | AdamW states GB "
          "| activations GB measured | planned | difference |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for line in open(measured):
        m = json.loads(line)
        out = subprocess.run([gpumeter, "plan", *m["plan_args"], "--gpus", "1", "--json"], capture_output=True,
                             text=True, check=True)
        plan = json.loads(out.stdout)["memory"]
        cells = []
        for term in TERMS[:3]:
            diff = plan[term] / m[term] - 1
            worst = max(worst, abs(diff))
            cells.append(f"{m[term] / 1e9:.3f} / {plan[term] / 1e9:.3f}")
        act, planned = m["activations_bytes"], plan["activations_bytes"]
        worst = max(worst, abs(planned / act - 1))
        print(f"| {m['model']} | {m['layers']} | {m['seq']} | {m['batch']} | {m['precision']} | "
              + " | ".join(cells)
              + f" | {act / 1e9:.3f} | {planned / 1e9:.3f} | {100 * (planned / act - 1):+.1f} % |")
    print(f"\nLargest difference over all terms: {100 * worst:.1f} %")


if __name__ == "__main__":
    main()
