"""Report training progress to ``gpumeter run`` (standard library only).

Outside ``gpumeter run`` (no ``GPUMETER_SOCKET`` in the environment) every call is a silent no-op, so a
script can call :func:`progress` unconditionally.
"""
import json
import math
import os
import socket

__all__ = ["progress", "checkpoint", "enabled", "dropped", "status", "metered", "spent_usd", "HFCallback",
           "LightningCallback", "load_ipython_extension", "unload_ipython_extension"]
__version__ = "0.1.0"

_sock = None
_sock_pid = None


def enabled():
    """True when running under ``gpumeter run`` (the progress socket is known)."""
    return bool(os.environ.get("GPUMETER_SOCKET"))


_dropped = {"metrics": 0, "fields": 0, "errors": 0}


def dropped():
    """How many values the client dropped instead of raising: non-finite or non-numeric metrics, counts that
    were not non-negative integers, and internal errors. A cost meter must never stop a training run."""
    return dict(_dropped)


def _scalar(value):
    """A Python number from any integral or real scalar: int, float, numpy scalars, 0-d arrays and tensors
    (``.item()``), objects with ``__index__`` or ``__float__``. None when it is not one."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return None
    if isinstance(value, (int, float)):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            value = item()  # numpy scalar, 0-d ndarray, torch tensor with one element
        except Exception:  # noqa: BLE001 - a tensor with many elements, a CUDA error: not a scalar
            return None
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return value
    try:
        return int(value.__index__())
    except Exception:  # noqa: BLE001
        pass
    try:
        return float(value)
    except Exception:  # noqa: BLE001
        return None


def _count(value):
    value = _scalar(value)
    if value is None:
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    return value if value >= 0 else None


def _message(step=None, total_steps=None, samples=None, tokens=None, metrics=None, flops_per_token=None):
    msg = {}
    if flops_per_token is not None:
        number = _scalar(flops_per_token)
        if number is None or not math.isfinite(float(number)) or float(number) <= 0:
            _dropped["fields"] += 1
        else:
            msg["flops_per_token"] = float(number)
    for key, value in (("step", step), ("total_steps", total_steps), ("samples", samples), ("tokens", tokens)):
        if value is None:
            continue
        count = _count(value)
        if count is None:
            _dropped["fields"] += 1
        else:
            msg[key] = count
    if metrics:
        clean = {}
        try:
            items = list(metrics.items())
        except Exception:  # noqa: BLE001 - not a mapping
            items = []
            _dropped["metrics"] += 1
        for key, value in items:
            number = _scalar(value)
            if number is None or not math.isfinite(float(number)):
                _dropped["metrics"] += 1
                continue
            clean[str(key)] = float(number)
        if clean:
            msg["metrics"] = clean
    return msg


def progress(step=None, total_steps=None, samples=None, tokens=None, metrics=None, flops_per_token=None):
    """Sends one progress report (all fields optional) and returns True when it was sent. ``tokens`` with
    ``flops_per_token`` (the model's training FLOPs per token, e.g. 6 x parameters) give the run's MFU. Accepts any
    integral or real scalar (numpy, 0-d torch tensors, ``__index__``/``__float__``); values that are not
    usable (NaN, inf, negative or fractional counts) are dropped and counted (see :func:`dropped`). Never
    raises: metering must never break a job."""
    try:
        return _send(_message(step, total_steps, samples, tokens, metrics, flops_per_token))
    except Exception:  # noqa: BLE001 - delivery problems and our own bugs alike
        _dropped["errors"] += 1
        return False


def status():
    """The meter's latest status of this run as a dict (``gpumeter run`` rewrites the file named by
    ``GPUMETER_STATUS_FILE`` every metering interval: ``spent_micros``, ``spent_usd``, ``burn_usd_per_s``,
    ``budget_left_usd``, ``forecast_usd``, ``step``, ``total_steps``, ``elapsed_s``, ``written_unix_ms``;
    docs/run.md). None outside ``gpumeter run`` or when the file cannot be read. Never raises."""
    path = os.environ.get("GPUMETER_STATUS_FILE")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return doc if isinstance(doc, dict) else None
    except Exception:  # noqa: BLE001 - missing between renames, unreadable: no figure, no exception
        return None


def _notebook_session():
    """The running ``%load_ext gpumeter`` session of this kernel, if any (gpumeter.notebook)."""
    import sys
    notebook = sys.modules.get("gpumeter.notebook")
    return getattr(notebook, "_session", None) if notebook is not None else None


def metered():
    """True when something meters this process: ``gpumeter run`` (its status file) or the notebook
    extension."""
    return status() is not None or _notebook_session() is not None


def spent_usd(now=None):
    """Dollars this run has cost so far: the meter's last figure plus its burn rate since it was written
    (``now``: a ``time.time()`` value); under the notebook extension, the session's spend. None outside
    both or without a price. Never raises."""
    doc = status()
    if doc is None:
        session = _notebook_session()
        try:
            return session.spent_now() if session is not None else None
        except Exception:  # noqa: BLE001
            return None
    if doc.get("spent_micros") is None:
        return None
    try:
        spent = doc["spent_micros"] / 1e6
        burn = doc.get("burn_usd_per_s") or 0.0
        import time
        age_s = max(0.0, (time.time() if now is None else now) - doc["written_unix_ms"] / 1000.0)
        return spent + burn * min(age_s, 60.0)
    except Exception:  # noqa: BLE001
        return None


def checkpoint(path=None):
    """Tells ``gpumeter run`` that the job has just written a checkpoint (``path``: where, optional), right
    after it is safely on disk. The run report then gives ``last_checkpoint_s`` and the work a stop or a
    preemption would lose (``lost_work_usd``). Returns True when it was sent; never raises."""
    try:
        if path is not None:
            path = os.fspath(path)
            if isinstance(path, bytes):
                path = path.decode("utf-8", "replace")
            path = str(path)[:4096]
        return _send({"checkpoint": path if path else True})
    except Exception:  # noqa: BLE001
        _dropped["errors"] += 1
        return False


def _send(msg):
    path = os.environ.get("GPUMETER_SOCKET")
    if not path or not msg:
        return False
    global _sock, _sock_pid
    if _sock is None or _sock_pid != os.getpid():  # a forked worker gets its own socket
        _sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        _sock.setblocking(False)
        _sock_pid = os.getpid()
    _sock.sendto(json.dumps(msg, separators=(",", ":")).encode("utf-8"), path)
    return True


def HFCallback(*args, **kwargs):
    """A Hugging Face ``transformers.TrainerCallback`` reporting steps and logged metrics."""
    from .integrations import make_hf_callback
    return make_hf_callback()(*args, **kwargs)


def LightningCallback(*args, **kwargs):
    """A PyTorch Lightning ``Callback`` reporting steps and logged metrics."""
    from .integrations import make_lightning_callback
    return make_lightning_callback()(*args, **kwargs)


def load_ipython_extension(ipython):
    """``%load_ext gpumeter``: a live cost badge, per-cell costs and a budget for this notebook's kernel
    (see :mod:`gpumeter.notebook`)."""
    from .notebook import load_ipython_extension as load
    load(ipython)


def unload_ipython_extension(ipython):
    """``%unload_ext gpumeter``: the meter detaches and records what it metered."""
    from .notebook import unload_ipython_extension as unload
    unload(ipython)
