"""Report training progress to ``gpumeter run`` (standard library only).

Outside ``gpumeter run`` (no ``GPUMETER_SOCKET`` in the environment) every call is a silent no-op, so a
script can call :func:`progress` unconditionally.
"""
import json
import math
import os
import socket

__all__ = ["progress", "enabled", "HFCallback", "LightningCallback"]
__version__ = "0.1.0"

_sock = None
_sock_pid = None


def enabled():
    """True when running under ``gpumeter run`` (the progress socket is known)."""
    return bool(os.environ.get("GPUMETER_SOCKET"))


def _count(name, value):
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError("%s must be an integer, not bool" % name)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise TypeError("%s must be an integer" % name)
    if value < 0:
        raise ValueError("%s must not be negative" % name)
    return value


def _message(step=None, total_steps=None, samples=None, tokens=None, metrics=None):
    msg = {}
    for key, value in (("step", step), ("total_steps", total_steps), ("samples", samples), ("tokens", tokens)):
        value = _count(key, value)
        if value is not None:
            msg[key] = value
    if metrics:
        clean = {}
        for key, value in metrics.items():
            try:
                value = float(value)
            except (TypeError, ValueError):
                continue
            if math.isfinite(value):
                clean[str(key)] = value
        if clean:
            msg["metrics"] = clean
    return msg


def progress(step=None, total_steps=None, samples=None, tokens=None, metrics=None):
    """Sends one progress report (all fields optional). Never raises on delivery problems: metering must
    never break a job. Bad argument types raise TypeError/ValueError so mistakes show up in development."""
    msg = _message(step, total_steps, samples, tokens, metrics)
    path = os.environ.get("GPUMETER_SOCKET")
    if not path or not msg:
        return False
    global _sock, _sock_pid
    try:
        if _sock is None or _sock_pid != os.getpid():  # a forked worker gets its own socket
            _sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            _sock.setblocking(False)
            _sock_pid = os.getpid()
        _sock.sendto(json.dumps(msg, separators=(",", ":")).encode("utf-8"), path)
        return True
    except OSError:
        return False


def HFCallback(*args, **kwargs):
    """A Hugging Face ``transformers.TrainerCallback`` reporting steps and logged metrics."""
    from .integrations import make_hf_callback
    return make_hf_callback()(*args, **kwargs)


def LightningCallback(*args, **kwargs):
    """A PyTorch Lightning ``Callback`` reporting steps and logged metrics."""
    from .integrations import make_lightning_callback
    return make_lightning_callback()(*args, **kwargs)
