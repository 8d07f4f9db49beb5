#!/usr/bin/env python3
"""Regenerates gpumeter's catalog files (data/*.csv) from the gathered facts in ../shared/data.

Usage: scripts/build_catalog.py [SHARED_DATA_DIR] [OUT_DIR]
Standard library only. The committed data/*.csv files are what the binary embeds; rerun this after the
facts change and review the diff.
"""
import csv
import os
import re
import sys

IMPORT_DATE = "2026-11-21"  # when these facts were imported; the sources carry commits, not dates

SPEC_ID = {  # (gpu, variant) in gpu_specs.csv -> (catalog id, form factor)
    ("H100", "SXM5 80GB"): ("H100 SXM 80GB", "SXM"),
    ("H100", "PCIe 80GB"): ("H100 PCIe 80GB", "PCIe"),
    ("H100", "NVL 94GB"): ("H100 NVL 94GB", "PCIe"),
    ("H200", "SXM 141GB"): ("H200 SXM 141GB", "SXM"),
    ("B200", "HGX B200 (per GPU)"): ("B200 SXM 180GB", "SXM"),
    ("A100", "SXM4 80GB"): ("A100 SXM 80GB", "SXM"),
    ("A100", "SXM4 40GB"): ("A100 SXM 40GB", "SXM"),
    ("A100", "PCIe 80GB"): ("A100 PCIe 80GB", "PCIe"),
    ("A100", "PCIe 40GB"): ("A100 PCIe 40GB", "PCIe"),
    ("L40S", "PCIe 48GB"): ("L40S 48GB", "PCIe"),
    ("L4", "PCIe 24GB"): ("L4 24GB", "PCIe"),
    ("A10", "PCIe 24GB"): ("A10 24GB", "PCIe"),
    ("A10G", "AWS G5 24GB"): ("A10G 24GB", "PCIe"),
    ("T4", "PCIe 16GB"): ("T4 16GB", "PCIe"),
    ("V100", "SXM2 16GB"): ("V100 SXM 16GB", "SXM"),
    ("V100", "SXM2 32GB"): ("V100 SXM 32GB", "SXM"),
    ("V100", "PCIe 16/32GB"): ("V100 PCIe 16GB", "PCIe"),
    ("RTX 4090", "GeForce 24GB"): ("RTX 4090 24GB", "PCIe"),
    ("MI300X", "OAM 192GB"): ("MI300X 192GB", "OAM"),
}

# (provider, raw gpu name, instance regex) -> catalog id; first match wins
OFFER_GPU = [
    ("aws", "H100", r".*", "H100 SXM 80GB"),
    ("aws", "H200", r".*", "H200 SXM 141GB"),
    ("aws", "B200", r".*", "B200 SXM 180GB"),
    ("aws", "B300", r".*", "B300"),
    ("aws", "A100", r".*", "A100 SXM 40GB"),
    ("aws", "A100-80GB", r".*", "A100 SXM 80GB"),
    ("aws", "A10G", r".*", "A10G 24GB"),
    ("aws", "L4", r".*", "L4 24GB"),
    ("aws", "L4 (0.25 fractional GPU)", r".*", "L4 24GB"),
    ("aws", "L40S", r".*", "L40S 48GB"),
    ("aws", "T4", r".*", "T4 16GB"),
    ("aws", "V100", r".*", "V100 SXM 16GB"),
    ("aws", "V100-32GB", r".*", "V100 SXM 32GB"),
    ("gcp", "H100", r".*", "H100 SXM 80GB"),
    ("gcp", "H100-MEGA", r".*", "H100 SXM 80GB"),
    ("gcp", "H200", r".*", "H200 SXM 141GB"),
    ("gcp", "B200", r".*", "B200 SXM 180GB"),
    ("gcp", "A100", r".*", "A100 SXM 40GB"),
    ("gcp", "A100-80GB", r".*", "A100 SXM 80GB"),
    ("gcp", "L4", r".*", "L4 24GB"),
    ("gcp", "T4", r".*", "T4 16GB"),
    ("gcp", "V100", r".*", "V100 SXM 16GB"),
    ("azure", "H100", r"Standard_NC\d+ad.*H100", "H100 NVL 94GB"),
    ("azure", "H100", r".*", "H100 SXM 80GB"),
    ("azure", "A100", r".*", "A100 SXM 40GB"),
    ("azure", "A100-80GB", r"Standard_NC\d+ads_A100", "A100 PCIe 80GB"),
    ("azure", "A100-80GB", r".*", "A100 SXM 80GB"),
    ("azure", "A10", r".*", "A10 24GB"),
    ("azure", "T4", r".*", "T4 16GB"),
    ("azure", "V100", r".*", "V100 SXM 16GB"),
    ("azure", "V100-32GB", r".*", "V100 SXM 32GB"),
    ("lambda", "A10", r".*", "A10 24GB"),
    ("lambda", "A100", r".*", "A100 SXM 40GB"),
    ("lambda", "A100-80GB", r".*", "A100 SXM 80GB"),
    ("lambda", "B200", r".*", "B200 SXM 180GB"),
    ("lambda", "GH200", r".*", "GH200"),
    ("lambda", "H100 (PCIe)", r".*", "H100 PCIe 80GB"),
    ("lambda", "H100 (SXM5)", r".*", "H100 SXM 80GB"),
    ("lambda", "RTX6000", r".*", "RTX 6000 24GB"),
    ("lambda", "V100", r".*", "V100 SXM 16GB"),
]


def gpu_id(provider, raw, instance):
    for p, name, pattern, cid in OFFER_GPU:
        if p == provider and name == raw and re.match(pattern, instance):
            return cid
    return raw


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../shared/data")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "../data")

    with open(os.path.join(src, "gpu_specs.csv")) as f:
        specs = list(csv.DictReader(f))
    with open(os.path.join(out, "gpus.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "family", "form", "vendor", "architecture", "memory_gb", "memory_type", "mem_bw_gbps",
                    "fp32_tflops", "tf32_dense_tflops", "bf16_dense_tflops", "fp16_dense_tflops",
                    "fp8_dense_tflops", "int8_dense_tops", "tdp_w", "interconnect", "interconnect_gbps",
                    "source", "verification"])
        for s in specs:
            cid, form = SPEC_ID[(s["gpu"], s["variant"])]
            w.writerow([cid, s["gpu"], form, s["vendor"], s["architecture"], s["memory_gb"], s["memory_type"],
                        s["mem_bw_gbps"], s["fp32_tflops"], s["tf32_dense_tflops"], s["bf16_dense_tflops"],
                        s["fp16_dense_tflops"], s["fp8_dense_tflops"], s["int8_dense_tops"], s["tdp_w"],
                        s["gpu_interconnect"], s["gpu_interconnect_gbps"], s["source"], s["verification"]])

    with open(os.path.join(src, "instance_prices.csv")) as f:
        prices = list(csv.DictReader(f))
    with open(os.path.join(out, "offers.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["provider", "region", "instance", "gpu", "gpu_count", "vcpus", "memory_gib",
                    "ondemand_usd_per_hour", "spot_usd_per_hour", "kind", "source", "date"])
        for p in prices:
            inst = p["instance"]
            kind = "instance"
            if "(host VM only)" in inst:
                kind = "host_vm"
                inst = inst.replace(" (host VM only)", "")
            elif inst.startswith("(GPU-only"):
                kind = "gpu_only"
                inst = "gpu-only-" + inst[len("(GPU-only "):-1].replace(":", "x").lower()
            gpu = gpu_id(p["provider"], p["gpu"], inst) if p["gpu"] else ""
            w.writerow([p["provider"], p["region"], inst, gpu, p["gpu_count"], p["vcpus"], p["mem_gib"],
                        p["ondemand_usd_per_h"], p["spot_usd_per_h"], kind, p["source"], p["date"] or IMPORT_DATE])

    with open(os.path.join(src, "billing_rules.csv")) as f:
        rules = list(csv.DictReader(f))
    with open(os.path.join(out, "billing.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["provider", "product", "rule", "value", "unit", "source", "source_date", "notes"])
        for r in rules:
            w.writerow([r["provider"], r["product"], r["rule"], r["value"], r["unit"], r["source"],
                        r["source_date"], r["notes"]])

    with open(os.path.join(src, "carbon_intensity.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "carbon.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["dataset", "provider", "region", "location", "g_co2e_per_kwh", "source"])
        for r in rows:
            w.writerow([r["dataset"], r["provider"], r["region"], r["location"], r["gco2e_per_kwh"],
                        f'{r["dataset_file"]}@{r["commit"]}'])

    with open(os.path.join(src, "pue.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "pue.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["provider", "region", "pue", "source"])
        for r in rows:
            w.writerow([r["provider"], r["region"], r["pue"], f'{r["source_file"]}@{r["commit"]} ({r["kind"]})'])


if __name__ == "__main__":
    main()
