"""Runs a notebook cell in a real browser: a real Jupyter Notebook server on loopback (ephemeral port, a token)
and headless Chromium driven over the DevTools protocol (tornado's websocket client; no other package).

usage: notebook_browser.py WORKDIR NOTEBOOK.ipynb SCREENSHOT.png
Prints one JSON object: {"badge_text": ..., "badge_html": ..., "outputs": ...}. Exit 1 with a reason otherwise.
The server and the browser are stopped (their process groups) before it exits.
"""
import asyncio
import base64
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from tornado.websocket import websocket_connect


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_http(url, deadline, process):
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    return False


class Cdp:
    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0

    async def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        await self.ws.write_message(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = await self.ws.read_message()
            if msg is None:
                raise RuntimeError("the browser closed the DevTools connection")
            data = json.loads(msg)
            if data.get("id") == mid:
                if "error" in data:
                    raise RuntimeError("%s: %s" % (method, data["error"]))
                return data.get("result", {})

    async def js(self, expression):
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            return None
        return r.get("result", {}).get("value")

    async def wait_js(self, expression, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.js(expression)
            if value:
                return value
            await asyncio.sleep(0.25)
        raise RuntimeError("timed out waiting for %s" % what)


async def drive(ws_url, page_url, shot_path):
    # The browser-level endpoint opens a page target; its own websocket drives it.
    host = re.match(r"ws://([^/]+)/", ws_url).group(1)
    with urllib.request.urlopen("http://%s/json/list" % host, timeout=10) as r:
        targets = [t for t in json.load(r) if t.get("type") == "page"]
    ws = await websocket_connect(targets[0]["webSocketDebuggerUrl"], max_message_size=64 << 20)
    cdp = Cdp(ws)
    await cdp.call("Page.enable")
    await cdp.call("Emulation.setDeviceMetricsOverride", width=1100, height=700, deviceScaleFactor=1, mobile=False)
    await cdp.call("Page.navigate", url=page_url)
    await cdp.wait_js("typeof Jupyter !== 'undefined' && Jupyter.notebook && Jupyter.notebook.kernel && "
                      "Jupyter.notebook.kernel.is_connected() && Jupyter.notebook._fully_loaded", 90,
                      "the notebook and its kernel")
    # Run the cells as a person would with Shift-Enter on each.
    await cdp.js("Jupyter.notebook.execute_all_cells(), true")
    text = await cdp.wait_js(
        "(function(){var b=document.querySelector('.gpumeter-badge');"
        "return b && /spent \\$[0-9]/.test(b.innerText) && /GPU util/.test(b.innerText) ? b.innerText : null})()",
        90, "the live badge with figures")
    badge_html = await cdp.js("document.querySelector('.gpumeter-badge').outerHTML")
    await cdp.wait_js("(function(){var p=Array.from(document.querySelectorAll('.input_prompt'));"
                      "return p.length > 0 && p.every(e => /\\[[0-9]+\\]/.test(e.innerText))})()", 90,
                      "the cells to finish")
    text = await cdp.js("document.querySelector('.gpumeter-badge').innerText")
    outputs = await cdp.js("Array.from(document.querySelectorAll('.output_area')).map(e => e.innerText).join('\\n')")
    await cdp.js("document.querySelector('.gpumeter-badge').scrollIntoView({block: 'center'})")
    await asyncio.sleep(0.3)
    rect = await cdp.js("(function(){var c=document.querySelector('.gpumeter-badge').closest('.cell')"
                        ".getBoundingClientRect();return [c.left, c.top, c.width, c.height]})()")
    shot = await cdp.call("Page.captureScreenshot", format="png",
                          clip={"x": max(0, rect[0] - 4), "y": max(0, rect[1] - 4), "width": rect[2] + 8,
                                "height": rect[3] + 8, "scale": 1})
    with open(shot_path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    await cdp.js("Jupyter.notebook.kernel.kill()")
    ws.close()
    return {"badge_text": text, "badge_html": badge_html, "outputs": outputs}


def main():
    workdir, notebook, shot = sys.argv[1], sys.argv[2], sys.argv[3]
    token = secrets.token_hex(16)
    server = port = None
    browser = None
    try:
        # A free port picked here may be taken before the server binds it (other tests run beside this one):
        # the server fails fast (--port-retries=0) and another port is tried.
        for _ in range(3):
            port = free_port()
            server = subprocess.Popen(
                [sys.executable, "-m", "notebook", "--no-browser", "--ip=127.0.0.1", "--port=%d" % port,
                 "--port-retries=0", "--NotebookApp.token=%s" % token, "--notebook-dir=%s" % workdir]
                + (["--allow-root"] if os.geteuid() == 0 else []),
                stdout=open(os.path.join(workdir, "server.log"), "wb"), stderr=subprocess.STDOUT,
                start_new_session=True)
            if wait_http("http://127.0.0.1:%d/api?token=%s" % (port, token), time.monotonic() + 60, server):
                break
            if server.poll() is None:
                raise RuntimeError("the notebook server did not answer on port %d" % port)
        else:
            raise RuntimeError("the notebook server could not start (ports taken?)")
        browser = subprocess.Popen(
            ["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--user-data-dir=%s" % os.path.join(workdir, "chromium-profile"), "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        ws_url = None
        deadline = time.monotonic() + 60
        while ws_url is None and time.monotonic() < deadline:
            line = browser.stderr.readline().decode("utf-8", "replace")
            if not line:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                ws_url = m.group(1)
        if ws_url is None:
            raise RuntimeError("chromium did not open its DevTools endpoint")
        url = "http://127.0.0.1:%d/notebooks/%s?token=%s" % (port, os.path.basename(notebook), token)
        result = asyncio.run(asyncio.wait_for(drive(ws_url, url, shot), 240))
        print(json.dumps(result))
    except Exception as e:  # noqa: BLE001
        log = open(os.path.join(workdir, "server.log"), encoding="utf-8", errors="replace").read()[-3000:]
        print("notebook_browser: %s\n--- server log ---\n%s" % (e, log), file=sys.stderr)
        sys.exit(1)
    finally:
        for p in (browser, server):
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=10)
                except Exception:  # noqa: BLE001
                    os.killpg(p.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
