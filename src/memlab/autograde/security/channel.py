"""Plain data between the judge and the learner's process: values as JSON, tensors as raw bytes.

Used by: :mod:`memlab.autograde.security.judge` (both ends of the channel),
tests/grading/test_judge.py.

A hidden test the judge runs calls the learner's function in another process: its arguments
go one way and its result the other, as data that executes no code when it is read. What
crosses:

- ``None``, ``bool``, ``int`` (at most :data:`MAX_INT_BITS` bits), ``float`` (``nan`` and the
  infinities included), ``str``; ``list``, ``tuple`` and ``dict`` (any keys of these kinds) of
  them, :data:`MAX_DEPTH` deep at most;
- ``torch.dtype``, ``torch.device``, ``torch.Size``;
- tensors: dtype, shape, device type, ``requires_grad`` and the bytes of their elements (no
  pickle: ``torch.frombuffer`` reads them back);
- the course's plain records named in :data:`RECORDS` (``ml.oom.JobSpec``, ``JobConfig``),
  field by field;
- anything else as an *opaque* value: its type's name and a short repr. The judge's side gets
  an object of a class of that name that equals nothing but itself, so a test that checks a
  result's type or value fails as it would have in the learner's kernel (a numpy float is not
  a float; an int subclass that compares equal to everything is not an int).

Only exact types are read as data (``type(x) is int``, not ``isinstance``): a subclass of int
that overrides ``__eq__`` is opaque. An object the learner's side has sent before is sent
again by reference (``{"ref": n}`` with its new contents), so aliasing survives the trip: a
function that returns the same dict twice returns the same object twice on the judge's side,
its contents updated, as a module-level dict shared by every caller would be.

Framing: each message is a 10-digit length, a newline, then that many bytes of UTF-8 JSON;
a message over :data:`MAX_MESSAGE` bytes, or one that does not decode, ends the channel
(:class:`ChannelError`).
"""
from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
from typing import Any

__all__ = ["ChannelError", "Opaque", "Encoder", "Decoder", "send", "recv", "send_form", "RECORDS"]

MAX_MESSAGE = 256 * 2**20
MAX_DEPTH = 32
MAX_INT_BITS = 4096
MAX_NODES = 1_000_000
MAX_STR = 4 * 2**20

# the course's plain records: "module:qualname" -> fields are data (bool, int, float, str)
RECORDS = ("memlab.lessons.oom:JobSpec", "memlab.lessons.oom:JobConfig")


class ChannelError(Exception):
    """The other side sent something that is not a message of this protocol, or went away."""


class Opaque:
    """A value that is not plain data, seen from the judge: equal only to itself."""

    type_name = "object"

    def __init__(self, text: str):
        self._text = text

    def __repr__(self) -> str:
        return self._text

    __str__ = __repr__


_OPAQUE: dict[str, type] = {}


def _opaque_class(name: str) -> type:
    name = "".join(ch for ch in str(name)[:80] if ch.isalnum() or ch in "._") or "object"
    short = name.rsplit(".", 1)[-1] or "object"
    if not short.isidentifier():
        short = "object"
    if name not in _OPAQUE:
        _OPAQUE[name] = type(short, (Opaque,), {"type_name": name, "__module__": "learner"})
    return _OPAQUE[name]


def _record_class(spec: str) -> type:
    """The record's class as its module holds it now (a test that reloads the module makes a
    new class: the value is rebuilt as one of those)."""
    import importlib

    mod, _, qual = spec.partition(":")
    return getattr(importlib.import_module(mod), qual)


def _torch():
    import torch

    return torch


class Encoder:
    """Turns values into JSON-able data. ``remember``: keep every container and tensor sent,
    to send it again by reference (the learner's side, for aliasing)."""

    def __init__(self, remember: bool = False):
        self.remember = remember
        self.sent: dict[int, tuple[Any, int]] = {}

    def encode(self, value: Any) -> Any:
        self._nodes = 0
        return self._enc(value, 0)

    def _ref(self, value: Any, data: dict) -> dict:
        if not self.remember:
            return data
        seen = self.sent.get(id(value))
        if seen is not None and seen[0] is value:
            return {"ref": seen[1], "value": data}
        n = len(self.sent)
        self.sent[id(value)] = (value, n)
        return {"new": n, "value": data}

    def _enc(self, v: Any, depth: int) -> Any:
        self._nodes += 1
        if depth > MAX_DEPTH or self._nodes > MAX_NODES:
            raise ChannelError("a value nested too deep or too large to send")
        t = type(v)
        if v is None or t is bool or t is str:
            if t is str and len(v) > MAX_STR:
                raise ChannelError(f"a string of {len(v)} characters is too long to send")
            return v
        if t is int:
            if v.bit_length() > MAX_INT_BITS:
                raise ChannelError(f"an int of {v.bit_length()} bits is too large to send")
            return v
        if t is float:
            return v if math.isfinite(v) else {"float": repr(v)}
        if t in (list, tuple):
            items = [self._enc(x, depth + 1) for x in v]
            return self._ref(v, {"list": items}) if t is list else {"tuple": items}
        if t is dict:
            items = [[self._enc(k, depth + 1), self._enc(x, depth + 1)] for k, x in v.items()]
            return self._ref(v, {"dict": items})
        torch = _torch()
        if t is torch.dtype:
            return {"dtype": str(v).removeprefix("torch.")}
        if t is torch.device:
            return {"device": str(v)}
        if t is torch.Size:
            return {"size": [int(d) for d in v]}
        if t in (torch.Tensor, torch.nn.Parameter):
            return self._ref(v, {"tensor": _tensor_data(v)})
        spec = f"{t.__module__}:{t.__qualname__}"
        if spec in RECORDS and dataclasses.is_dataclass(v):
            return {"record": spec,
                    "fields": {f.name: self._enc(getattr(v, f.name), depth + 1)
                               for f in dataclasses.fields(v)}}
        return {"opaque": f"{t.__module__}.{t.__qualname__}"[:200], "repr": _short_repr(v)}


def _short_repr(v: Any) -> str:
    try:
        text = object.__repr__(v)
    except Exception:  # noqa: BLE001
        text = "<object>"
    return text[:200]


def _tensor_data(t) -> dict:
    torch = _torch()
    x = t.detach()
    if x.is_sparse or x.layout != torch.strided:
        raise ChannelError("a sparse tensor cannot be sent")
    cpu = x.to("cpu").contiguous()
    raw = cpu.reshape(-1).view(torch.uint8).numpy().tobytes() if cpu.numel() else b""
    return {"dtype": str(cpu.dtype).removeprefix("torch."), "shape": list(cpu.shape),
            "device": x.device.type, "grad": bool(t.requires_grad),
            "bytes": base64.b64encode(raw).decode("ascii")}


class Decoder:
    """Reads data back into values, strictly: anything not of this protocol is a
    :class:`ChannelError`. ``device``: where tensors are rebuilt (their own device type when
    this process has it, else the CPU)."""

    def __init__(self):
        self.seen: dict[int, Any] = {}

    def decode(self, data: Any) -> Any:
        self._nodes = 0
        return self._dec(data, 0)

    def _dec(self, d: Any, depth: int) -> Any:
        self._nodes += 1
        if depth > MAX_DEPTH or self._nodes > MAX_NODES:
            raise ChannelError("a value nested too deep or too large")
        t = type(d)
        if d is None or t in (bool, str):
            return d
        if t is int:
            if d.bit_length() > MAX_INT_BITS:
                raise ChannelError("an int too large")
            return d
        if t is float:
            return d
        if t is not dict or len(d) > 6:
            raise ChannelError(f"not a value of this protocol: {type(d).__name__}")
        if "new" in d or "ref" in d:
            return self._aliased(d, depth)
        (tag, *_rest) = d
        body = d[tag]
        if tag == "float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "tuple" and type(body) is list:
            return tuple(self._dec(x, depth + 1) for x in body)
        if tag in ("list", "dict", "tensor"):
            return self._container(tag, body, depth)
        torch = _torch()
        if tag == "dtype" and type(body) is str:
            dt = getattr(torch, body, None)
            if type(dt) is not torch.dtype:
                raise ChannelError(f"no dtype {body!r}")
            return dt
        if tag == "device" and type(body) is str and len(body) < 40:
            return torch.device(body)
        if tag == "size" and type(body) is list \
                and all(type(x) is int and 0 <= x < 2**40 for x in body):
            return torch.Size(body)
        if tag == "record" and body in RECORDS and type(d.get("fields")) is dict:
            cls = _record_class(body)
            names = {f.name for f in dataclasses.fields(cls)}
            fields = {k: self._dec(v, depth + 1) for k, v in d["fields"].items() if k in names}
            if not all(type(v) in (bool, int, float, str) or v is None for v in fields.values()):
                raise ChannelError(f"a {body} whose fields are not plain values")
            return cls(**fields)
        if tag == "opaque" and type(body) is str:
            return _opaque_class(body)(str(d.get("repr", ""))[:200])
        raise ChannelError(f"not a value of this protocol: {tag!r}")

    def _container(self, tag: str, body: Any, depth: int, into: Any = None) -> Any:
        if tag == "list" and type(body) is list:
            items = [self._dec(x, depth + 1) for x in body]
            if into is None:
                return items
            into[:] = items
            return into
        if tag == "dict" and type(body) is list:
            pairs = []
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise ChannelError("a dict item that is not a pair")
                key = self._dec(pair[0], depth + 1)
                try:
                    hash(key)
                except TypeError:
                    raise ChannelError("a dict key that is not hashable") from None
                pairs.append((key, self._dec(pair[1], depth + 1)))
            out = {} if into is None else into
            out.clear()
            out.update(pairs)
            return out
        if tag == "tensor" and type(body) is dict:
            t = _tensor_of(body)
            if into is None:
                return t
            import torch

            with torch.no_grad():
                into.set_(t.to(into.device) if t.device != into.device else t)
            return into
        raise ChannelError(f"a malformed {tag}")

    def _aliased(self, d: dict, depth: int) -> Any:
        value = d.get("value")
        if type(value) is not dict or len(value) != 1:
            raise ChannelError("a malformed reference")
        (tag, body), = value.items()
        if "new" in d:
            n = d["new"]
            out = self._container(tag, body, depth)  # its items are numbered before it
            if type(n) is not int or n in self.seen or n != len(self.seen):
                raise ChannelError("a reference out of order")
            self.seen[n] = out
            return out
        n = d["ref"]
        if type(n) is not int or n not in self.seen:
            raise ChannelError("a reference to nothing sent")
        old = self.seen[n]
        kinds = {"list": list, "dict": dict}
        if tag in kinds and type(old) is not kinds[tag] or tag == "tensor" and not _is_tensor(old):
            raise ChannelError("a reference to a value of another kind")
        return self._container(tag, body, depth, into=old)


def _is_tensor(x) -> bool:
    torch = _torch()
    return isinstance(x, torch.Tensor)


def _tensor_of(body: dict):
    torch = _torch()
    dtype = getattr(torch, str(body.get("dtype")), None)
    shape = body.get("shape")
    if type(dtype) is not torch.dtype or type(shape) is not list or \
            not all(type(s) is int and 0 <= s < 2**40 for s in shape):
        raise ChannelError("a malformed tensor")
    try:
        raw = base64.b64decode(str(body.get("bytes", "")), validate=True)
    except ValueError:
        raise ChannelError("a tensor whose bytes do not decode") from None
    n = math.prod(shape)
    size = torch.empty((), dtype=dtype).element_size()
    if len(raw) != n * size:
        raise ChannelError(f"a tensor of shape {shape} with {len(raw)} bytes")
    flat = (torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw
            else torch.empty(0, dtype=torch.uint8))
    t = flat.view(dtype).reshape(shape) if raw else torch.empty(shape, dtype=dtype)
    dev = str(body.get("device", "cpu"))
    if dev == "cuda" and torch.cuda.is_available():
        t = t.to("cuda")
    if body.get("grad") is True and (t.is_floating_point() or t.is_complex()):
        t.requires_grad_(True)
    return t


def send(fd: int, obj: Any) -> None:
    """Write one message (``obj`` already JSON-able) to ``fd``."""
    data = json.dumps(obj, allow_nan=False, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_MESSAGE:
        raise ChannelError(f"a message of {len(data)} bytes is too large")
    view = memoryview(b"%010d\n" % len(data) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    import select
    import time

    parts, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelError("the other side did not answer in time")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise ChannelError("the other side went away")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def recv(fd: int, deadline: float | None = None) -> Any:
    """Read one message from ``fd`` (by ``deadline``, a ``time.monotonic()`` value)."""
    head = _read_exact(fd, 11, deadline)
    if not head[:10].isdigit() or head[10:] != b"\n":
        raise ChannelError("a message without its length")
    n = int(head[:10])
    if n > MAX_MESSAGE:
        raise ChannelError(f"a message of {n} bytes is too large")
    try:
        return json.loads(_read_exact(fd, n, deadline).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ChannelError("a message that is not JSON") from None


def send_form(data: Any) -> str:
    """One text for data that are the same (to see whether a call changed its arguments)."""
    return json.dumps(data, sort_keys=True, allow_nan=False)
