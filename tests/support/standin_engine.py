#!/usr/bin/env python3
"""A stand-in for a serving engine's /metrics endpoint (the real engines need a GPU).

Serves the vLLM V1 exposition (names and labels of vllm/v1/metrics/loggers.py) on 127.0.0.1, with counters that
advance on every scrape: +100 prompt tokens, +40 generated tokens, +2 requests, +25 cached prompt tokens.
Prints "port N" on stdout once listening. Usage: standin_engine.py MODEL
"""
import http.server
import sys
import threading

MODEL = sys.argv[1] if len(sys.argv) > 1 else "standin-llama"
lock = threading.Lock()
scrapes = 0


def exposition(n):
    m = 'model_name="%s",engine="0"' % MODEL.replace("\\", "\\\\").replace('"', '\\"')
    return (
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        "vllm:prompt_tokens_total{%s} %.1f\n"
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        "vllm:generation_tokens_total{%s} %.1f\n"
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        "vllm:prefix_cache_hits_total{%s} %.1f\n"
        "# HELP vllm:request_success_total Count of successfully processed requests.\n"
        "# TYPE vllm:request_success_total counter\n"
        'vllm:request_success_total{%s,finished_reason="stop"} %.1f\n'
        'vllm:request_success_total{%s,finished_reason="length"} 0.0\n'
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n"
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        'vllm:time_to_first_token_seconds_bucket{%s,le="0.1"} %.1f\n'
        'vllm:time_to_first_token_seconds_bucket{%s,le="+Inf"} %.1f\n'
        "vllm:time_to_first_token_seconds_sum{%s} %.3f\n"
        "vllm:time_to_first_token_seconds_count{%s} %.1f\n"
    ) % (m, 100.0 * n, m, 40.0 * n, m, 25.0 * n, m, 2.0 * n, m, m, 2.0 * n, m, 2.0 * n, m, 0.05 * n, m, 2.0 * n)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global scrapes
        if self.path != "/metrics":
            self.send_error(404)
            return
        with lock:
            scrapes += 1
            body = exposition(scrapes).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("port", server.server_address[1], flush=True)
server.serve_forever()
