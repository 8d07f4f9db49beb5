#!/usr/bin/env python3
"""Stand-in for the providers' public price sources, serving recorded-format files from a directory.

Paths are the providers' own:
  /api/retail/prices?$filter=... [&$skip=N]            Azure Retail Prices API  -> azure-<region>-<N>.json
                                                       (no file: an empty page, as the API answers an unknown region)
  /offers/v1.0/aws/AmazonEC2/current/<region>/index.csv AWS Price List bulk CSV  -> aws-<region>.csv (no file: 404)
  /v1/services/6F81-5844-456A/skus?key=K[&pageToken=T] GCP Cloud Billing Catalog -> gcp-first.json / gcp-<T>.json
                                                       (403 without key=)
  /api/v1/instance-types (Authorization: Bearer K)     Lambda Cloud API         -> lambda-instance-types.json (401 without)
"{BASE}" in a file becomes this server's own http://127.0.0.1:PORT. A file NAME with a NAME.cut beside it is
sent with its full Content-Length but only half its bytes before the connection closes (a cut transfer).
Every request line is appended to requests.log in the directory.

Usage: price_standin.py DIR PORT_FILE   (binds 127.0.0.1 on an ephemeral port and writes it to PORT_FILE)
"""
import http.server
import os
import re
import sys
import urllib.parse


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet; requests.log has them
        pass

    def send_body(self, status, body, ctype, cut=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if cut:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if cut else body)
        self.wfile.flush()
        if cut:
            self.close_connection = True

    def serve_file(self, name, ctype, missing=None):
        path = os.path.join(self.server.data_dir, name)
        if not os.path.exists(path):
            if missing is not None:
                return self.send_body(200, missing.encode(), ctype)
            return self.send_body(404, b'{"message": "Not Found"}', "application/json")
        with open(path, "rb") as f:
            body = f.read().replace(b"{BASE}", self.server.base.encode())
        self.send_body(200, body, ctype, cut=os.path.exists(path + ".cut"))

    def do_GET(self):
        with open(os.path.join(self.server.data_dir, "requests.log"), "a") as log:
            log.write(self.path + "\n")
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/api/retail/prices":
            region = re.search(r"armRegionName eq '([^']*)'", query.get("$filter", [""])[0])
            skip = query.get("$skip", ["0"])[0]
            empty = '{"BillingCurrency": "USD", "Items": [], "NextPageLink": null, "Count": 0}'
            return self.serve_file(f"azure-{region.group(1) if region else 'none'}-{skip}.json", "application/json", empty)
        m = re.fullmatch(r"/offers/v1\.0/aws/AmazonEC2/current/([a-z0-9-]+)/index\.csv", url.path)
        if m:
            return self.serve_file(f"aws-{m.group(1)}.csv", "text/csv")
        if url.path == "/v1/services/6F81-5844-456A/skus":
            if not query.get("key"):
                return self.send_body(403, b'{"error": {"code": 403, "message": "The request is missing a valid API key."}}',
                                      "application/json")
            token = query.get("pageToken", ["first"])[0]
            return self.serve_file(f"gcp-{token}.json", "application/json")
        if url.path == "/api/v1/instance-types":
            if not self.headers.get("Authorization", "").startswith("Bearer "):
                return self.send_body(401, b'{"error": {"code": "global/invalid-api-key"}}', "application/json")
            return self.serve_file("lambda-instance-types.json", "application/json")
        return self.send_body(404, b'{"message": "Not Found"}', "application/json")


def main():
    data_dir, port_file = sys.argv[1], sys.argv[2]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.data_dir = data_dir
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
