"""The IPython extension of gpumeter: ``%load_ext gpumeter`` (standard library and IPython only).

It runs ``gpumeter attach <kernel PID> --json-lines --from start --grace never`` beside the kernel and shows
what the session has cost in a badge that updates live; ``%gpumeter`` configures it and prints the session
summary, ``%gpumeter cells`` the cost of every cell. Cells reach the meter as datagrams on its progress
socket (``{"cell": {"id", "event", "status", "source"}}``); the meter owns the money and answers with the
cell's cost. Nothing here may break the notebook: every failure becomes one line and the kernel goes on.
"""
import argparse
import html
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from IPython.core.error import InputRejected

__all__ = ["load_ipython_extension", "unload_ipython_extension", "BudgetExceeded"]

#: Magics that run even while the session is over its budget (so the budget can be raised, the summary read).
_ALWAYS_ALLOWED = ("%gpumeter", "%load_ext", "%reload_ext", "%unload_ext")

_session = None


class BudgetExceeded(InputRejected):
    """A cell refused because the session is over its budget (shown as one line, no traceback)."""

    def _render_traceback_(self):
        return [str(self)]


def _usd(value):
    if value is None:
        return "-"
    if abs(value) < 0.01 and value != 0:
        return "$%.4f" % value
    return "$%.2f" % value


def _duration(seconds):
    seconds = max(0, int(round(seconds or 0)))
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, (seconds % 3600) // 60)


def _parse_pct(text):
    text = str(text).strip().rstrip("%")
    value = float(text)
    if not 0 < value <= 100:
        raise ValueError("a percentage in (0, 100]")
    return value


class _Badge:
    """The live badge: HTML for Notebook / JupyterLab, plain text for nbconvert and terminals."""

    def __init__(self, text, html_text):
        self.text = text
        self.html_text = html_text

    def _repr_html_(self):
        return self.html_text

    def __repr__(self):
        return self.text


class _Session:
    """One kernel's metering: the attach process, its JSON lines, the badge and the cell hooks."""

    def __init__(self, shell):
        self.shell = shell
        self.price = os.environ.get("GPUMETER_PRICE")
        self.offer = None
        self.budget = None
        self.warn_at = "80%"
        self.target = None
        self.max_idle = "30m"
        self.cell_threshold = 0.01
        self.proc = None
        self.started = False
        self.lock = threading.Lock()
        self.state = {}
        self.started_info = {}
        self.cells = []
        self.cell_event = threading.Condition(self.lock)
        self.actions = []
        self.pending_notes = []
        self.stderr_tail = ""
        self.ended = None
        self.failed = None
        self.sock = None
        self.handle = None
        self.last_badge = 0.0
        self.current_cell = None
        self.current_refused = False
        self.stopped = False
        self.counter = 0
        self.refused_cell = False
        self.current_source = ""
        self.badge_pending = False

    # ---- the attach process --------------------------------------------------------------------------

    def binary(self):
        path = os.environ.get("GPUMETER_BIN")
        if path:
            return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
        return shutil.which("gpumeter")

    def command(self, binary):
        args = [binary, "attach", str(os.getpid()), "--json-lines", "--from", "start", "--grace", "never",
                "--stop-signal", "INT", "--label", "kind=notebook", "--warn-at", self.warn_at,
                "--max-idle", self.max_idle]
        notebook = os.environ.get("JPY_SESSION_NAME") or self.shell.user_ns.get("__vsc_ipynb_file__")
        if notebook:
            args += ["--label", "notebook=%s" % notebook]
        if self.price is not None:
            args += ["--price", str(self.price)]
        if self.offer is not None:
            args += ["--offer", self.offer]
        if self.budget is not None:
            args += ["--budget", repr(float(self.budget))]
        if self.target is not None:
            args += ["--target", self.target]
        return args

    def start(self):
        if self.started:
            return
        self.started = True
        binary = self.binary()
        if binary is None:
            where = "$GPUMETER_BIN=%s is not an executable file" % os.environ["GPUMETER_BIN"] \
                if os.environ.get("GPUMETER_BIN") else "no gpumeter binary on PATH (set $GPUMETER_BIN)"
            self.fail("%s: this notebook is not metered" % where)
            return
        try:
            # Its own session: the Interrupt button signals the kernel's process group, not the meter.
            self.proc = subprocess.Popen(self.command(binary), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        except OSError as e:
            self.fail("cannot start %s: %s; this notebook is not metered" % (binary, e))
            return
        self.stderr_thread = threading.Thread(target=self._read_stderr, name="gpumeter-attach-err", daemon=True)
        self.stderr_thread.start()
        threading.Thread(target=self._read_stdout, name="gpumeter-attach", daemon=True).start()

    def stop(self):
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)  # attach detaches and records what it metered
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                pass
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def fail(self, message):
        with self.lock:
            if self.failed:
                return
            self.failed = message
        print("gpumeter: %s" % message, file=sys.stderr)
        self.update_badge(force=True)

    def _read_stderr(self):
        try:
            for raw in self.proc.stderr:
                with self.lock:
                    self.stderr_tail = (self.stderr_tail + raw.decode("utf-8", "replace"))[-2000:]
        except Exception:  # noqa: BLE001
            pass

    def _read_stdout(self):
        try:
            for raw in self.proc.stdout:
                try:
                    msg = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(msg, dict):
                    self.on_message(msg)
        except Exception as e:  # noqa: BLE001 - the meter must never break the kernel
            self.fail("reading the meter failed: %s" % e)
        code = self.proc.wait()
        self.stderr_thread.join(timeout=2.0)  # its last words, for the message below
        with self.lock:
            ended = self.ended
            tail = self.stderr_tail.strip().splitlines()
        if ended is None:
            reason = tail[-1] if tail else "no message"
            self.fail("the meter (gpumeter attach) stopped unexpectedly (exit %s: %s); this notebook is no longer "
                      "metered (%%reload_ext gpumeter restarts it)" % (code, reason))

    def on_message(self, msg):
        kind = msg.get("type")
        if kind == "started":
            with self.lock:
                self.started_info = msg
            path = msg.get("socket")
            if path:
                os.environ["GPUMETER_SOCKET"] = path  # gpumeter.progress() in cells feeds the forecast
        elif kind == "interval":
            with self.lock:
                self.state = msg
                self.state["received"] = time.monotonic()
            self.update_badge()
        elif kind == "cell":
            with self.lock:
                self.cells.append(msg)
                self.cell_event.notify_all()
        elif kind == "action":
            with self.lock:
                self.actions.append(msg)
                if msg.get("kind", "").startswith("stop_"):
                    self.stopped = True
                if msg.get("kind") in ("warn", "stop_budget", "idle_gpus_held"):
                    self.pending_notes.append("gpumeter: [%s] %s" % (msg.get("kind"), msg.get("message")))
            self.update_badge(force=True)
        elif kind == "warning":
            print("gpumeter: %s" % msg.get("message"), file=sys.stderr)
        elif kind == "end":
            with self.lock:
                self.ended = msg

    def send(self, obj):
        path = self.started_info.get("socket")
        if not path:
            return False
        try:
            if self.sock is None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self.sock.setblocking(False)
            self.sock.sendto(json.dumps(obj, separators=(",", ":")).encode("utf-8"), path)
            return True
        except OSError:
            return False

    def wait_started(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.started_info or self.failed or self.ended is not None:
                    return
            time.sleep(0.02)

    # ---- figures ---------------------------------------------------------------------------------------

    def spent_now(self):
        """Spend now: the last interval extrapolated at its $/h (what the meter's bill says)."""
        with self.lock:
            s = dict(self.state)
        if s.get("spent_usd") is None:
            return None
        rate = s.get("usd_per_h") or 0.0
        return s["spent_usd"] + rate * max(0.0, time.monotonic() - s.get("received", time.monotonic())) / 3600.0

    def budget_now(self):
        with self.lock:
            b = self.state.get("budget_usd")
        return b if b is not None else self.budget

    def over_budget(self):
        budget = self.budget_now()
        spent = self.spent_now()
        if budget is None or spent is None:
            return False
        return spent >= budget or (self.stopped and self.state.get("stopping"))

    # ---- the badge -------------------------------------------------------------------------------------

    def badge(self):
        with self.lock:
            s = dict(self.state)
            failed = self.failed
            actions = list(self.actions)
        if failed:
            text = "gpumeter: %s" % failed
            return _Badge(text, '<div style="font-family:sans-serif;font-size:13px;padding:6px 10px;'
                                'border-left:4px solid #999;background:#f4f4f4;color:#555">%s</div>'
                          % html.escape(text))
        if not s:
            text = "gpumeter: metering this kernel… (the first figures arrive within seconds)"
            if not self.started:
                text = "gpumeter: metering starts with the next cell (%gpumeter --price USD first to set the price)"
            return _Badge(text, '<div style="font-family:sans-serif;font-size:13px;padding:6px 10px;'
                                'border-left:4px solid #4a8;background:#f3faf6">%s</div>' % html.escape(text))
        parts = ["this session has spent %s" % _usd(s.get("spent_usd"))]
        if s.get("usd_per_h") is not None:
            parts.append("%s/h" % _usd(s["usd_per_h"]))
        if s.get("util_pct") is not None:
            parts.append("GPU util %.0f%%" % s["util_pct"])
        if s.get("memory_used_mib") is not None:
            mem = "memory %.1f GiB" % (s["memory_used_mib"] / 1024.0)
            if s.get("memory_total_mib"):
                mem += " / %.0f GiB" % (s["memory_total_mib"] / 1024.0)
            parts.append(mem)
        if s.get("forecast_usd") is not None:
            parts.append("forecast %s" % _usd(s["forecast_usd"]))
        if (s.get("target") or {}).get("text"):
            parts.append(s["target"]["text"])
        extra = []
        budget = s.get("budget_usd")
        color = "#2a7"
        if budget is not None:
            extra.append("budget %s" % _usd(budget))
            spent = s.get("spent_usd") or 0.0
            if spent >= budget:
                color = "#c33"
                extra.append("OVER BUDGET: new cells are refused (%gpumeter --budget USD raises it)")
            elif any(a.get("kind") == "warn" for a in actions):
                color = "#d90"
        for f in s.get("findings") or []:
            if f.get("kind") == "idle_gpus_held":
                color = "#d90" if color == "#2a7" else color
                extra.append("idle_gpus_held: GPUs idle %s with memory held, %s/h"
                             % (_duration(f.get("idle_s")), _usd(f.get("usd_per_h"))))
        if not s.get("telemetry", True):
            extra.append("no GPU telemetry: wall time × price")
        text = " · ".join(parts) + ("  [" + "; ".join(extra) + "]" if extra else "")
        body = " · ".join(html.escape(p) for p in parts)
        first = html.escape(parts[0])
        body = body.replace(first, "<b>%s</b>" % first, 1)
        more = "".join('<div style="font-size:12px;color:#555">%s</div>' % html.escape(e) for e in extra)
        html_text = ('<div class="gpumeter-badge" style="font-family:sans-serif;font-size:14px;padding:6px 10px;'
                     'border-left:4px solid %s;background:#f7f9fb"><span style="font-size:11px;font-weight:bold;'
                     'color:#fff;background:%s;border-radius:3px;padding:1px 5px;margin-right:6px">gpumeter</span>'
                     '%s%s</div>' % (color, color, body, more))
        return _Badge("gpumeter: " + text, html_text)

    def show_badge(self):
        try:
            from IPython.display import display
            self.handle = display(self.badge(), display_id=True)
        except Exception:  # noqa: BLE001
            self.handle = None

    def update_badge(self, force=False):
        now = time.monotonic()
        if self.handle is None or (not force and now - self.last_badge < 1.0):
            return
        self.last_badge = now
        try:
            self.handle.update(self.badge())
        except Exception:  # noqa: BLE001 - a closed frontend, a kernel shutting down
            pass

    # ---- cell hooks --------------------------------------------------------------------------------------

    def allowed(self, raw):
        first = raw.lstrip().split("\n", 1)[0].strip()
        return any(first == m or first.startswith(m + " ") for m in _ALWAYS_ALLOWED)

    def pre_run_cell(self, info):
        try:
            raw = getattr(info, "raw_cell", "") or ""
            if self.badge_pending:
                self.badge_pending = False
                self.show_badge()
            configuring = self.allowed(raw)
            if not self.started and not configuring:
                self.start()
                self.wait_started(5.0)
            self.counter += 1
            self.current_cell = self.counter
            self.current_refused = bool(self.started and not configuring and self.over_budget())
            first = raw.strip().split("\n", 1)[0][:200]
            self.current_source = first
            if not self.current_refused and not configuring:
                self.send({"cell": {"id": self.current_cell, "event": "start", "source": first}})
            else:
                self.current_cell = None if not self.current_refused else self.current_cell
        except Exception as e:  # noqa: BLE001
            self.fail("internal error before the cell: %s" % e)

    def visit(self, node):
        """AST transformer: a cell over budget is refused before it runs (one line, no traceback)."""
        if self.current_refused:
            self.current_refused = False
            self.refused_cell = True
            raise BudgetExceeded(
                "gpumeter: this session has spent %s of its %s budget: the cell was not run. "
                "%%gpumeter --budget USD raises the budget." % (_usd(self.spent_now()), _usd(self.budget_now())))
        self.refused_cell = False
        return node

    def post_run_cell(self, result):
        try:
            cell = self.current_cell
            self.current_cell = None
            if cell is None:
                return
            refused = getattr(self, "refused_cell", False) or isinstance(result.error_before_exec, BudgetExceeded)
            self.refused_cell = False
            if refused:
                self.send({"cell": {"id": cell, "event": "end", "status": "refused", "source": self.current_source}})
                return
            err = result.error_in_exec
            status = "ok" if result.success else ("interrupted" if isinstance(err, KeyboardInterrupt) else "error")
            with self.lock:
                before = len(self.cells)
            if not self.send({"cell": {"id": cell, "event": "end", "status": status}}):
                return
            deadline = time.monotonic() + 1.0
            row = None
            with self.lock:
                while time.monotonic() < deadline:
                    row = next((c for c in self.cells[before:] if c.get("id") == cell), None)
                    if row is not None or self.ended is not None:
                        break
                    self.cell_event.wait(timeout=max(0.0, deadline - time.monotonic()))
                notes, self.pending_notes = self.pending_notes, []
            for note in notes:
                print(note, file=sys.stderr)
            if status == "interrupted" and self.stopped:
                print("gpumeter: the budget stopped this cell (KeyboardInterrupt); the kernel and its variables are "
                      "intact. %gpumeter --budget USD raises the budget.", file=sys.stderr)
            if row is not None and (row.get("cost_usd") or 0) >= self.cell_threshold:
                util = row.get("util_pct")
                print("cell cost %s · %s%s" % (_usd(row["cost_usd"]), _duration(row.get("wall_s")),
                                               " · util %.0f%%" % util if util is not None else ""))
            self.update_badge(force=True)
        except Exception as e:  # noqa: BLE001
            self.fail("internal error after the cell: %s" % e)

    # ---- the magic ---------------------------------------------------------------------------------------

    def configure(self, args):
        restart_needed = (args.price is not None or args.offer is not None or args.max_idle is not None
                          or args.target is not None)
        if restart_needed and self.started and self.proc is not None:
            print("gpumeter: the price, --max-idle and --target of a metered session are fixed once it runs (they apply to "
                  "the whole session): set them before the first cell, or restart the kernel", file=sys.stderr)
            return
        if args.price is not None:
            self.price, self.offer = args.price, None
        if args.offer is not None:
            self.offer, self.price = args.offer, None
        if args.max_idle is not None:
            self.max_idle = args.max_idle
        if args.target is not None:
            self.target = args.target
        if args.cell_threshold is not None:
            self.cell_threshold = args.cell_threshold
        control = {}
        if args.budget is not None:
            self.budget = args.budget
            control["budget_usd"] = args.budget
            with self.lock:
                self.stopped = False
                if self.state:
                    self.state["budget_usd"] = args.budget
                    self.state["stopping"] = False
        if args.warn_at is not None:
            self.warn_at = args.warn_at
            control["warn_at"] = args.warn_at
        if control and self.started_info:
            self.send({"control": control})
        parts = []
        if self.price is not None:
            parts.append("price $%s/GPU-h" % self.price)
        if self.offer is not None:
            parts.append("offer %s" % self.offer)
        if self.budget is not None:
            parts.append("budget %s (warn at %s)" % (_usd(self.budget), self.warn_at))
        print("gpumeter: %s" % (", ".join(parts) if parts else "configured"))
        self.update_badge(force=True)

    def summary(self):
        with self.lock:
            s = dict(self.state)
            info = dict(self.started_info)
            failed = self.failed
            cells = list(self.cells)
            actions = list(self.actions)
        if failed:
            print("gpumeter: %s" % failed)
            return
        if not s:
            print("gpumeter: no figures yet (the meter %s)" % ("is starting" if self.started else
                                                              "starts with the next cell"))
            return
        lines = ["gpumeter session (run %s, kernel PID %s, since the kernel started %s ago)"
                 % (info.get("run_id"), info.get("pid"), _duration(s.get("elapsed_s")))]
        lines.append("  spent           %s at %s/h" % (_usd(self.spent_now()), _usd(s.get("usd_per_h"))))
        budget = self.budget_now()
        if budget is not None:
            left = budget - (self.spent_now() or 0.0)
            lines.append("  budget          %s (%s)" % (_usd(budget), "%s left" % _usd(left) if left >= 0
                                                        else "over by %s" % _usd(-left)))
        gpus = s.get("gpus") or []
        for g in gpus:
            mem = ""
            if g.get("memory_used_mib") is not None:
                mem = " · memory %.1f GiB" % (g["memory_used_mib"] / 1024.0)
                if g.get("memory_total_mib"):
                    mem += " / %.0f GiB" % (g["memory_total_mib"] / 1024.0)
            util = " util %s%%" % g["util_pct"] if g.get("util_pct") is not None else ""
            lines.append("  GPU %-11s%s%s" % (g.get("index"), util, mem))
        if not gpus:
            lines.append("  GPUs            none metered (no GPU telemetry)")
        if s.get("idle_cost_usd") is not None:
            lines.append("  idle cost       %s (GPU time under full utilization)" % _usd(s["idle_cost_usd"]))
        lines.append("  cells           %d metered" % len(cells))
        findings = [f for f in (s.get("findings") or [])]
        for f in findings:
            if f.get("kind") == "idle_gpus_held":
                lines.append("  finding         idle_gpus_held: the GPUs idled %s with memory held, %s/h — free "
                             "the memory or shut the kernel down" % (_duration(f.get("idle_s")),
                                                                       _usd(f.get("usd_per_h"))))
        for a in actions:
            if a.get("kind") in ("warn", "stop_budget", "sigint", "budget"):
                lines.append("  [%s] %s" % (a.get("kind"), a.get("message")))
            elif a.get("kind") == "gpu_match":  # how the kernel was matched to its GPUs (in a container)
                lines.append("  note            %s" % a.get("message"))
        print("\n".join(lines))

    def list_cells(self):
        with self.lock:
            cells = list(self.cells)
            spent = self.state.get("spent_usd")
        if not cells:
            print("gpumeter: no cell metered yet")
            return
        total = self.spent_now() or spent or 0.0
        print("%-6s %-9s %-10s %-7s %-6s %-12s %s" % ("cell", "wall", "cost", "share", "util", "status", "source"))
        for c in cells:
            share = "%.0f%%" % (100.0 * c.get("cost_usd", 0) / total) if total > 0 else "-"
            util = "%.0f%%" % c["util_pct"] if c.get("util_pct") is not None else "-"
            print("%-6s %-9s %-10s %-7s %-6s %-12s %s" % (c.get("id"), _duration(c.get("wall_s")),
                                                            _usd(c.get("cost_usd")), share, util,
                                                            c.get("status"), c.get("source", "")[:60]))


def _magic_parser():
    p = argparse.ArgumentParser(prog="%gpumeter", add_help=False)
    p.add_argument("what", nargs="?", choices=["cells", "badge"])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--price", type=float)
    g.add_argument("--offer")
    p.add_argument("--budget", type=float)
    p.add_argument("--warn-at", dest="warn_at")
    p.add_argument("--max-idle", dest="max_idle")
    p.add_argument("--cell-threshold", dest="cell_threshold", type=float)
    p.add_argument("--target")
    p.add_argument("-h", "--help", action="store_true")
    return p


_HELP = """%gpumeter                       the session summary (spent, $/h, GPUs, idle cost, findings)
%gpumeter cells                 each executed cell's cost: wall time, $ and share of the session, GPU util
%gpumeter badge                 show the live badge here
%gpumeter [--price USD_PER_GPU_HOUR | --offer PROVIDER:INSTANCE[:spot]] [--budget USD] [--warn-at 80%]
          [--max-idle 30m] [--cell-threshold USD] [--target METRIC<=V|METRIC>=V]
                                configure (price, offer, --max-idle and --target before the first cell);
                                --target forecasts when and at what cost the metric the job reports
                                (gpumeter.progress(metrics=...)) reaches the target"""


def _magic(line):
    session = _session
    if session is None:
        print("gpumeter: the extension is not loaded (%load_ext gpumeter)", file=sys.stderr)
        return
    try:
        args = _magic_parser().parse_args(shlex.split(line))
    except SystemExit:
        print(_HELP, file=sys.stderr)
        return
    except ValueError as e:
        print("gpumeter: %s" % e, file=sys.stderr)
        return
    if args.help:
        print(_HELP)
        return
    try:
        if args.price is not None and not args.price > 0:
            raise ValueError("--price must be a positive number of USD per GPU-hour")
        if args.budget is not None and not args.budget > 0:
            raise ValueError("--budget must be a positive number of USD")
        if args.warn_at is not None:
            for item in args.warn_at.split(","):
                _parse_pct(item)
        if args.cell_threshold is not None and args.cell_threshold < 0:
            raise ValueError("--cell-threshold must be at least 0")
        if args.target is not None:
            from gpumeter.optuna import parse_target
            parse_target(args.target)
    except ValueError as e:
        print("gpumeter: %s" % e, file=sys.stderr)
        return
    configuring = any(v is not None for v in (args.price, args.offer, args.budget, args.warn_at, args.max_idle,
                                              args.cell_threshold, args.target))
    if configuring:
        session.configure(args)
        return
    if args.what == "cells":
        session.list_cells()
    elif args.what == "badge":
        session.show_badge()
    else:
        if not session.started:
            session.start()
            session.wait_started(5.0)
        session.summary()


def load_ipython_extension(shell):
    """%load_ext gpumeter: meters this kernel (gpumeter attach) and shows the live badge."""
    global _session
    if _session is not None:
        return
    session = _Session(shell)
    _session = session
    shell.events.register("pre_run_cell", session.pre_run_cell)
    shell.events.register("post_run_cell", session.post_run_cell)
    shell.ast_transformers.append(session)
    shell.register_magic_function(_magic, magic_kind="line", magic_name="gpumeter")
    # Loaded from the kernel's configuration (no cell is running): the badge goes in the first cell.
    if getattr(shell, "parent_header", True):
        session.show_badge()
    else:
        session.badge_pending = True


def unload_ipython_extension(shell):
    """%unload_ext gpumeter: the meter detaches and records what it metered."""
    global _session
    session = _session
    if session is None:
        return
    _session = None
    for name, fn in (("pre_run_cell", session.pre_run_cell), ("post_run_cell", session.post_run_cell)):
        try:
            shell.events.unregister(name, fn)
        except ValueError:
            pass
    if session in shell.ast_transformers:
        shell.ast_transformers.remove(session)
    session.stop()
