"""Byte units. Binary units throughout: KiB = 2**10, MiB = 2**20, GiB = 2**30 bytes.

Decimal GB (10**9) appears only where a source (a paper, a GPU's marketing size) uses it,
and is then named GB explicitly.
"""
from __future__ import annotations

KiB = 2**10
MiB = 2**20
GiB = 2**30
GB = 10**9

__all__ = ["KiB", "MiB", "GiB", "GB", "fmt_bytes"]


def fmt_bytes(n_bytes: float, digits: int = 2) -> str:
    """``fmt_bytes(1572864) -> '1.50 MiB'``; negative numbers keep their sign."""
    sign = "-" if n_bytes < 0 else ""
    n = abs(float(n_bytes))
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{sign}{n / size:.{digits}f} {unit}"
    return f"{sign}{int(n)} B"
