"""Report training progress to ``gpumeter run`` (standard library only).

Outside ``gpumeter run`` (no ``GPUMETER_SOCKET`` in the environment) every call is a silent no-op, so a
script can call :func:`progress` unconditionally.
"""
import json
import math
import os
import socket

__all__ = ["progress", "enabled", "dropped", "HFCallback", "LightningCallback", "load_ipython_extension",
           "unload_ipython_extension"]
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


def _message(step=None, total_steps=None, samples=None, tokens=None, metrics=None):
    msg = {}
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


def progress(step=None, total_steps=None, samples=None, tokens=None, metrics=None):
    """Sends one progress report (all fields optional) and returns True when it was sent. Accepts any
    integral or real scalar (numpy, 0-d torch tensors, ``__index__``/``__float__``); values that are not
    usable (NaN, inf, negative or fractional counts) are dropped and counted (see :func:`dropped`). Never
    raises: metering must never break a job."""
    try:
        msg = _message(step, total_steps, samples, tokens, metrics)
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
    except Exception:  # noqa: BLE001 - delivery problems and our own bugs alike
        _dropped["errors"] += 1
        return False


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
