#!/usr/bin/python3
"""Runs the progress layouts (layouts.py) under `gpumeter run`, several at a time, for
ProgressMatrixIntegrationTest: `run_matrix.py GPUMETER OUT_DIR JOBS [NAME|PREFIX*|!PREFIX*...]` (names, names
starting with PREFIX, or all but those; none: every layout). For each layout it writes
OUT_DIR/NAME.json (gpumeter's --json-report), NAME.out, NAME.err (the job's output and gpumeter's status
lines) and a ledger of its own; OUT_DIR/index.json lists name, expected total, exit code and wall time. The
environment (fake NVML scenario) is inherited."""
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
LAYOUTS = os.path.join(HERE, "layouts.py")
PYTHON = "/usr/bin/python3"


def run_one(gpumeter, out_dir, layout):
    name = layout["name"]
    env = dict(os.environ)
    env.update(layout["env"])
    env["GPUMETER_LEDGER"] = os.path.join(out_dir, name + ".db")
    cmd = [gpumeter, "run", "--price", "3600", "--quiet", "--status-every", "1s", "--json-report",
           os.path.join(out_dir, name + ".json")] + layout["args"] + [PYTHON, LAYOUTS, name]
    start = time.monotonic()
    with open(os.path.join(out_dir, name + ".out"), "wb") as out, \
            open(os.path.join(out_dir, name + ".err"), "wb") as err:
        try:
            code = subprocess.run(cmd, stdout=out, stderr=err, env=env, timeout=120).returncode
        except subprocess.TimeoutExpired:
            code = -1
    return {"name": name, "total": layout["total"], "check_from": layout["check_from"], "exit_code": code,
            "wall_s": time.monotonic() - start}


def main():
    gpumeter, out_dir, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    wanted = sys.argv[4:]
    layouts = json.loads(subprocess.run([PYTHON, LAYOUTS, "--list"], check=True, capture_output=True).stdout)

    def chosen(name):
        keep = [w for w in wanted if not w.startswith("!")]
        if keep and not any(name == w or (w.endswith("*") and name.startswith(w[:-1])) for w in keep):
            return False
        return not any(w.startswith("!") and name.startswith(w[1:].rstrip("*")) for w in wanted)

    layouts = [l for l in layouts if chosen(l["name"])]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda l: run_one(gpumeter, out_dir, l), layouts))
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
