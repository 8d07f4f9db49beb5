#!/usr/bin/env python3
"""A stand-in for a served model under `gpumeter run` (real vLLM needs a GPU): a real http.server process
that serves the vLLM V1 exposition (names and labels of vllm/v1/metrics/loggers.py, as
standin_engine.py) with counters that advance with time, then exits.

Usage: standin_served_job.py PORT SECONDS LOG [RESTART_AT]
  PORT 0 picks a free port (for `--inference-endpoint auto`). Counters: per elapsed second of its own clock,
  +120 prompt and +60 generated tokens and +3 requests for model "standin-llama", and +20 generated tokens and
  +1 request for "standin-lora" after the third second. At RESTART_AT seconds the engine "restarts": counters
  start again from zero and process_start_time_seconds changes. Every served body is appended to LOG as one
  JSON line {"generated": total, ...} so tests can check what was served.
"""
import http.server
import json
import sys
import threading
import time

PORT = int(sys.argv[1])
SECONDS = float(sys.argv[2])
LOG = sys.argv[3]
RESTART_AT = float(sys.argv[4]) if len(sys.argv) > 4 else None
T0 = time.monotonic()
lock = threading.Lock()


def counters():
    t = time.monotonic() - T0
    start = 1700000000.0
    if RESTART_AT is not None and t >= RESTART_AT:
        t -= RESTART_AT
        start = 1700000100.0
    s = int(t * 10) / 10.0  # advances in tenths of a second
    llama = {"prompt": 120 * s, "gen": 60 * s, "req": 3 * s, "cached": 30 * s}
    lora = {"prompt": 0.0, "gen": 20 * max(0.0, s - 3), "req": 1 * max(0.0, s - 3), "cached": 0.0}
    return start, llama, lora


def exposition():
    start, llama, lora = counters()
    out = [
        "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
        "# TYPE process_start_time_seconds gauge",
        "process_start_time_seconds %.2f" % start,
    ]
    for name, help_text, key in (
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "prompt"),
        ("vllm:generation_tokens_total", "Number of generation tokens processed.", "gen"),
        ("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", "cached"),
    ):
        out.append("# HELP %s %s" % (name, help_text))
        out.append("# TYPE %s counter" % name)
        for model, c in (("standin-llama", llama), ("standin-lora", lora)):
            out.append('%s{model_name="%s",engine="0"} %.1f' % (name, model, c[key]))
    out.append("# HELP vllm:request_success_total Count of successfully processed requests.")
    out.append("# TYPE vllm:request_success_total counter")
    for model, c in (("standin-llama", llama), ("standin-lora", lora)):
        out.append('vllm:request_success_total{model_name="%s",engine="0",finished_reason="stop"} %.1f' % (model, c["req"]))
        out.append('vllm:request_success_total{model_name="%s",engine="0",finished_reason="length"} 0.0' % model)
    with lock, open(LOG, "a") as f:
        f.write(json.dumps({"t": time.monotonic() - T0, "llama_gen": llama["gen"], "lora_gen": lora["gen"]}) + "\n")
    return "\n".join(out) + "\n"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        body = exposition().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
print("serving on port", server.server_address[1], flush=True)
time.sleep(max(0.0, SECONDS - (time.monotonic() - T0)))
server.shutdown()
