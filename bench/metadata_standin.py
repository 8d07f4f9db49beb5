#!/usr/bin/env python3
"""A stand-in for AWS's instance metadata service (IMDSv2, as documented: PUT /latest/api/token with
X-aws-ec2-metadata-token-ttl-seconds, then GETs with X-aws-ec2-metadata-token; spot/instance-action and the
rebalance recommendation answer 404 until a notice). Prints its port, serves until killed. For benchmarks."""
import http.server
import sys

TOKEN = "AQAEAFakeBenchToken=="


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            body = TOKEN.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(400)

    def do_GET(self):
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self.send_error(401)
        else:
            self.send_error(404)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
