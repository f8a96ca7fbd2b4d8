"""Choosing the device, and the version banner every notebook prints first.

Used by: every notebook (first code cell), the autograder, the tests.

The rule is simple and explicit: CUDA when it is present, otherwise the CPU. Asking for
CUDA on a machine without it is an error, never a silent fallback: a learner who believes
they measured a GPU must not be shown CPU numbers.
"""
from __future__ import annotations

import platform

import torch

__all__ = ["DeviceUnavailableError", "get_device", "device_name", "versions_banner"]


class DeviceUnavailableError(RuntimeError):
    """An explicitly requested device does not exist on this machine."""


def get_device(request: str | torch.device | None = None) -> torch.device:
    """Return the device to measure on.

    ``request=None`` (or ``"auto"``): ``cuda`` when ``torch.cuda.is_available()``, else ``cpu``.
    ``request="cuda"`` (or ``"cuda:N"``) on a machine without CUDA raises
    :class:`DeviceUnavailableError` with a message that says what to do.
    """
    if request is None or (isinstance(request, str) and request.strip().lower() == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(request)
    except (RuntimeError, TypeError) as exc:
        raise DeviceUnavailableError(
            f"unknown device {request!r}: use 'cuda', 'cuda:N', 'cpu' or None for automatic"
        ) from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"device {request!r} was requested but CUDA is not available here "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}). "
                "Run on a machine with an NVIDIA GPU and a CUDA build of torch, or pass "
                "device=None / 'cpu' to measure with the CPU tracker instead."
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"device {request!r} was requested but only {torch.cuda.device_count()} "
                "CUDA device(s) exist"
            )
        return dev
    if dev.type in ("cpu", "meta"):
        return dev
    raise DeviceUnavailableError(
        f"device type {dev.type!r} is not supported by the course: use 'cuda' or 'cpu'"
    )


def device_name(device: str | torch.device | None = None) -> str:
    """Human-readable name: the GPU's name on CUDA, the processor on CPU."""
    dev = get_device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return platform.processor() or platform.machine() or "CPU"


def versions_banner(device: str | torch.device | None = None) -> str:
    """The lines every notebook prints first (paste them into bug reports).

    Outside the supported Python/torch range (:mod:`memlab.measure.compat`) it raises
    :class:`memlab.measure.compat.UnsupportedTorchError`, whose message names what is missing and the
    exact pip line that fixes it; inside, the last line says where this torch stands.
    """
    from . import compat

    report = compat.require_supported(compat.check())
    dev = get_device(device)
    lines = [
        f"python  {platform.python_version()}",
        f"torch   {torch.__version__}",
        f"device  {dev} ({device_name(dev)})",
    ]
    if dev.type == "cuda":
        lines.append(f"CUDA    {torch.version.cuda}, {torch.cuda.device_count()} GPU(s)")
    else:
        lines.append("CUDA    not available: memory is counted by the CPU tracker "
                     "(exact live tensor bytes)")
    lines.extend(compat.banner_lines(report))
    return "\n".join(lines)
