"""Numeric answers: quantities with units (bytes, time, ratios, counts), and their grader.

Used by: :func:`memlab.grading.answers.grade.grade_numeric` / :func:`memlab.grading.answers.grade.parse_quantity` (the
estimation exercises of 01 and 02, the numeric questions of :mod:`memlab.grading.interview.bank`).
See :func:`grade_numeric` for the rules: GB = 10**9 and GiB = 2**30 bytes are converted
into each other, but a number that is right only in the other unit system is a unit mix-up
and scores 0 with a message; ``Mb``/``Gb`` (bits) are not ``MB``/``GB`` (bytes); a plain
number is read in the question's unit (flagged unless the question says so); a final value
after shown working (``"1.3B x 16 B = 20.8 GB"``) is the answer.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from .result import Result, _as_number, _as_text, _flagged, _type_name
from memlab.measure.units import GB, GiB, KiB, MiB

__all__ = ["grade_numeric", "parse_quantity"]

TB = 10**12  # bytes, decimal
TiB = 2**40  # bytes, binary


# unit -> (family, size in the family's base unit). Lower case; "µ" is read as "u".
_UNITS: dict[str, tuple[str, float]] = {}


def _add_units(family: str, size: float, *names: str) -> None:
    for name in names:
        _UNITS[name] = (family, size)


_add_units("bytes", 1, "b", "byte", "bytes")
_add_units("bytes", 10**3, "kb", "kilobyte", "kilobytes")
_add_units("bytes", 10**6, "mb", "megabyte", "megabytes")
_add_units("bytes", GB, "gb", "gigabyte", "gigabytes")
_add_units("bytes", TB, "tb", "terabyte", "terabytes")
_add_units("bytes", KiB, "kib", "kibibyte", "kibibytes")
_add_units("bytes", MiB, "mib", "mebibyte", "mebibytes")
_add_units("bytes", GiB, "gib", "gibibyte", "gibibytes")
_add_units("bytes", TiB, "tib", "tebibyte", "tebibytes")
# bits, as written with an upper-case prefix and a lower-case b ("1552 Mb", "8 Gbit"):
# read as bytes / 8 and named in the feedback (see _bits_marked)
_add_units("bytes", 1 / 8, "bit", "bits")
_add_units("bytes", 10**3 / 8, "kbit", "kbits", "kilobit", "kilobits")
_add_units("bytes", 10**6 / 8, "mbit", "mbits", "megabit", "megabits")
_add_units("bytes", GB / 8, "gbit", "gbits", "gigabit", "gigabits")
_add_units("bytes", TB / 8, "tbit", "tbits", "terabit", "terabits")
_add_units("bytes", MiB / 8, "mibit", "mibits")
_add_units("bytes", GiB / 8, "gibit", "gibits")
_add_units("seconds", 1, "s", "sec", "secs", "second", "seconds")
_add_units("seconds", 1e-3, "ms", "msec", "millisecond", "milliseconds")
_add_units("seconds", 1e-6, "us", "microsecond", "microseconds")
_add_units("seconds", 60, "min", "mins", "minute", "minutes")
_add_units("seconds", 3600, "h", "hr", "hrs", "hour", "hours")
_add_units("percent", 1, "%", "percent", "pct")
_add_units("ratio", 1, "x", "times")
_add_units("count", 1, "params", "parameters", "elements", "values", "tokens")
# Bare prefixes ("28G") are read as decimal and flagged when GiB would grade differently.
_AMBIGUOUS_BYTES = {"k": 10**3, "m": 10**6, "g": GB, "t": TB}
_COUNT_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "bn": 1e9, "t": 1e12}
_BYTE_UNITS_SHOWN = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
_DISPLAY = {name.lower(): name for name in _BYTE_UNITS_SHOWN}
_DISPLAY.update(kbit="Kb", mbit="Mb", gbit="Gb", tbit="Tb", mibit="Mib", gibit="Gib")
_SCALE_WORDS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}

_QTY = re.compile(
    r"(?P<num>[+-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)"
    r"(?:\s*(?:x|\*|×|·)\s*10\s*(?:\^|\*\*)\s*(?P<exp>[+-]?\d+)"
    r"|\s*(?:\^|\*\*)\s*(?P<pow>[+-]?\d+))?"
    r"(?:\s*(?P<scale>thousand|million|billion|trillion)\b)?"
    r"(?:\s*(?P<unit>[a-z%]+))?"
)
_APPROX = re.compile(r"\b(?:about|around|roughly|approximately|approx|circa|ca|nearly|almost)\b\.?|[~≈=]")


def _unit_key(unit: str) -> str:
    return unit.strip().lower().replace("µ", "u").replace("μ", "u")


def _declared(unit: str) -> tuple[str, float]:
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a str, got {_type_name(unit)}")
    key = _unit_key(unit)
    if key in ("", "count", "number"):
        return ("count", 1.0)
    if key not in _UNITS:
        raise ValueError(f"unknown unit {unit!r}; known: {sorted(_UNITS)}")
    return _UNITS[key]


@dataclass(frozen=True)
class _Quantity:
    value: float      # in the declared unit
    unit: str         # as written by the learner, lower case ("" for a plain number)
    size: float       # the learner's unit in the family's base unit (bytes, seconds, ...)
    ambiguous: bool   # a bare prefix such as "28G", read as decimal


_BITS_WRITTEN = re.compile(r"(?<=[\d\s])([KMGT])(i?)b(?:its?)?\b")   # Mb, Gib, Kbit: bits


def _bits_marked(text: str) -> str:
    """"1552 Mb" -> "1552 mbit": the case that tells bits from bytes is read before lowering."""
    return _BITS_WRITTEN.sub(lambda m: f"{m[1].lower()}{m[2]}bit", text)


def _read_quantities(text: str, family: str, unit_size: float) -> tuple[list[_Quantity], str]:
    s = _unit_key(_bits_marked(text))
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)       # 28,000,000 -> 28000000
    s = re.sub(r"(?<=\d),(?=\d)", ".", s)                 # 26,1 -> 26.1 (decimal comma)
    s = _APPROX.sub(" ", s)
    out: list[_Quantity] = []
    for m in _QTY.finditer(s):
        try:
            num = float(m["num"].replace("_", ""))
            if m["exp"]:
                num *= 10.0 ** int(m["exp"])
            elif m["pow"]:
                num = num ** int(m["pow"])
        except (OverflowError, ZeroDivisionError, ValueError):
            num = math.inf
        if m["scale"]:
            num *= _SCALE_WORDS[m["scale"]]
        unit = m["unit"] or ""
        ambiguous = False
        if not unit:
            size = unit_size
        elif family == "bytes" and unit in _AMBIGUOUS_BYTES:
            size, ambiguous = float(_AMBIGUOUS_BYTES[unit]), True
        elif family == "count" and unit in _COUNT_SUFFIX:
            size = _COUNT_SUFFIX[unit]
        elif unit in _UNITS:
            fam, size = _UNITS[unit]
            if fam != family:
                return [], (f"'{m.group(0).strip()}' is in {fam}, but this question asks for "
                            f"{family}")
        else:
            hint = f" (use {', '.join(_BYTE_UNITS_SHOWN)})" if family == "bytes" else ""
            return [], f"unknown unit '{unit}' in '{m.group(0).strip()}'{hint}"
        out.append(_Quantity(num * size / unit_size, unit, float(size), ambiguous))
    return out, ""


def parse_quantity(answer: object, unit: str = "GB") -> tuple[float | None, str]:
    """Read one quantity from a learner's answer, converted to ``unit``.

    Returns ``(value, "")`` or ``(None, message)``. Accepts numbers (read in ``unit``)
    and strings such as ``"28 GB"``, ``"26.1 GiB"``, ``"1.5e9 bytes"``, ``"~24GB"``,
    ``"2.4 x 10^10 B"``, ``"1.5 billion bytes"``, ``"28,000 MB"``. GB is 10**9 bytes and
    GiB is 2**30: an answer in GiB for a GB question is converted, not rejected. Several
    quantities are accepted only when they agree within 1% ("24 GB (22.4 GiB)").
    """
    family, unit_size = _declared(unit)
    return _parse(answer, family, unit_size)[:2]


def _parse(answer: object, family: str, unit_size: float) -> tuple[float | None, str, _Quantity | None]:
    number = _as_number(answer)
    if number is not None:
        if not math.isfinite(number):
            return None, "the answer is not a finite number", None
        return number, "", _Quantity(number, "", unit_size, False)
    text = _as_text(answer)
    if text is None:
        return None, f"expected a number or a string such as '28 GB', got {_type_name(answer)}", None
    if not text.strip():
        return None, "no answer given", None
    if len(text) > 200:
        return None, "the answer is too long: give one value with its unit, e.g. '28 GB'", None
    # shown working: "1.3B x 16 B = 20.8 GB" is answered by the value after the last "="
    if "=" in text and re.search(r"\d", text.rsplit("=", 1)[1]):
        text = text.rsplit("=", 1)[1]
    quantities, error = _read_quantities(text, family, unit_size)
    if error:
        return None, error, None
    if not quantities:
        return None, f"no number found in {text.strip()!r}", None
    first = quantities[0]
    for q in quantities[1:]:
        if not math.isclose(q.value, first.value, rel_tol=0.01):
            return None, (f"found {len(quantities)} different values in {text.strip()!r}: "
                          "give exactly one"), None
    if not math.isfinite(first.value):
        return None, "the answer is not a finite number", None
    return first.value, "", first


def _fmt(value: float, unit: str) -> str:
    shown = f"{value:.0f}" if 1e4 <= abs(value) < 1e7 and value == round(value) else f"{value:.4g}"
    return f"{shown} {unit}".strip()


def grade_numeric(
    answer: object,
    expected: float,
    unit: str = "GB",
    *,
    full_tol: float = 0.05,
    partial_tol: float = 0.20,
    partial_score: float = 0.5,
    abs_tol: float = 0.0,
    plain_in_unit: bool = False,
) -> Result:
    """Grade a numeric estimate: full credit within ``full_tol`` relative error, then
    ``partial_score`` within ``partial_tol``, else 0.

    ``expected`` is in ``unit`` (one of B/KB/MB/GB/TB, KiB/MiB/GiB/TiB, s/ms/us/min/h,
    %, x, params or "" for a plain count). An answer with a unit of the same kind is
    converted (GiB -> GB). ``abs_tol`` adds an absolute tolerance, in ``unit`` (useful
    when ``expected`` is 0). Used by the numeric questions of 07
    (:mod:`memlab.grading.interview.bank`).

    - A unit mix-up scores 0, whatever the tolerance, with a message that names it: a
      value off by exactly the decimal/binary factor (1.024 ... 1.0995, within 1%) or by
      8 (bits for bytes). ``Mb``/``Gb``/``Gbit`` are bits: "1552 Mb" is 194 MB.
    - A plain number (``0.4`` or ``"0.4"``) is read in ``unit``. Unless the question says
      so (``plain_in_unit=True``: "answer in ms"), a plain number that is not right is
      flagged for review, and the feedback says which unit would make it right; a count or a
      factor (``unit`` "" or "x") has no unit to leave out.
    - Shown working is fine: in ``"1.3B x 16 B = 20.8 GB"`` the value after the last
      ``=`` is the answer.
    """
    family, unit_size = _declared(unit)
    _check_tolerances(expected, full_tol, partial_tol, partial_score)
    value, error, quantity = _parse(answer, family, unit_size)
    details: dict[str, Any] = {"expected": expected, "unit": unit}
    if value is None or quantity is None:
        return Result(0.0, [error, f"expected about {_fmt(expected, unit)}"], kind="numeric",
                      details=details)
    band = _band(expected, full_tol, partial_tol, partial_score, abs_tol)
    score, rel = band(value)
    details.update(value=value, rel_error=rel)
    written = _DISPLAY.get(quantity.unit, quantity.unit)
    shown = written and f" (read from {_fmt(value * unit_size / quantity.size, written)})"
    lines: list[str] = []
    reasons: list[str] = []
    if family == "bytes" and score < 1.0:
        mixup = _unit_mixup(quantity, value, expected, unit_size, band)
        if mixup:
            score = 0.0
            lines.append(mixup)
            details["unit_mixup"] = True
    if score < 1.0 and not quantity.unit and family not in ("count", "ratio"):
        # a count or a factor has no unit to leave out: "32" for "how many steps?" and "2" for
        # "by what factor?" are wrong numbers, not unit mix-ups
        _plain_number(value, family, unit, unit_size, band, plain_in_unit, lines, reasons)
    if quantity.unit.endswith(("bit", "bits")):
        lines.append(f"'{written}' is read as bits (8 bits = 1 byte): write B, MB, GB, MiB or "
                     "GiB for bytes")
    verdict = {1.0: "full credit", 0.0: "no credit"}.get(score, f"{score:g} credit")
    lines.insert(0, f"expected {_fmt(expected, unit)}; you gave {_fmt(value, unit)}{shown or ''}: "
                    f"{_off(rel)} -> {verdict} (full within {full_tol:.0%}, partial within "
                    f"{partial_tol:.0%})")
    if quantity.ambiguous:
        _ambiguous_unit(quantity, value, score, band, lines, reasons)
    return _flagged(score, lines, reasons, kind="numeric", details=details)


def _check_tolerances(expected: float, full_tol: float, partial_tol: float,
                      partial_score: float) -> None:
    """Raise ValueError for an instructor's impossible tolerances or expected value."""
    for name, tol in (("full_tol", full_tol), ("partial_tol", partial_tol)):
        if type(tol) not in (int, float) or not 0 <= tol:
            raise ValueError(f"{name} must be a non-negative number, got {tol!r}")
    if type(expected) not in (int, float) or not math.isfinite(expected):
        raise ValueError(f"expected must be a finite int or float, got {expected!r}")
    if partial_tol < full_tol:
        raise ValueError("partial_tol must be >= full_tol")
    if type(partial_score) not in (int, float) or not 0 <= partial_score <= 1:
        raise ValueError(f"partial_score must be in [0, 1], got {partial_score!r}")


def _band(expected: float, full_tol: float, partial_tol: float, partial_score: float,
          abs_tol: float) -> Callable[[float], tuple[float, float]]:
    """The grading of a value in the question's unit: (score, relative error), full credit
    within ``full_tol`` or ``abs_tol``, ``partial_score`` within ``partial_tol``, else 0."""
    def band(v: float) -> tuple[float, float]:
        err = abs(v - expected)
        rel = err / abs(expected) if expected != 0 else (0.0 if err == 0 else math.inf)
        if rel <= full_tol or err <= abs_tol:
            return 1.0, rel
        if rel <= partial_tol:
            return float(partial_score), rel
        return 0.0, rel
    return band


def _plain_number(value: float, family: str, unit: str, unit_size: float, band,
                  plain_in_unit: bool, lines: list[str], reasons: list[str]) -> None:
    """The remarks on a plain number that is not right: the unit that would make it right, or
    (unless the question says it is read in ``unit``) that it lacks one."""
    hint = _plain_hint(value, family, unit, unit_size, band)
    if hint:
        lines.append(hint)
        reasons.append(f"a plain number that is right if read in another unit than {unit}")
    elif not plain_in_unit:
        lines.append(f"a plain number is read in {unit}: write the unit with it")
        reasons.append(f"a plain number without a unit, read in {unit}")


def _ambiguous_unit(q: _Quantity, value: float, score: float, band, lines: list[str],
                    reasons: list[str]) -> None:
    """The remark on a bare "G" (or k, M, T), read as decimal; flagged when as binary it would
    score otherwise."""
    alt_size = {"k": KiB, "m": MiB, "g": GiB, "t": TiB}[q.unit]
    alt_score, _ = band(value * alt_size / q.size)
    lines.append(f"'{q.unit.upper()}' is ambiguous: write GB (10^9) or GiB (2^30)")
    if alt_score != score:
        reasons.append(f"unit '{q.unit.upper()}' read as decimal; as binary it "
                       f"would score {alt_score:g}")


def _level(size: float) -> int:
    """1 for KB/KiB (and kilobits), 2 for MB/MiB, 3 for GB/GiB, 4 for TB/TiB, else 0."""
    for n in range(1, 5):
        if any(math.isclose(size, base**n / d) for base in (1000, 1024) for d in (1, 8)):
            return n
    return 0


def _unit_mixup(q: _Quantity, value: float, expected: float, unit_size: float, band) -> str:
    """A message naming the unit mix-up, else '': bits given for bytes, or a value off from
    ``expected`` by exactly the decimal/binary factor of the units involved (within 1%)."""
    if expected == 0 or value == 0:
        return ""
    if q.unit.endswith(("bit", "bits")) and band(value * 8)[0] == 1.0:
        return ("your number is right in bytes, not bits: a bits vs bytes mix-up (Mb, Gb are "
                "bits; MB, GB, MiB, GiB are bytes): no credit")
    ratio = value / expected
    for n in sorted({_level(unit_size), _level(q.size) if q.unit else 0} - {0}):
        factor = 1.024**n
        prefix = " KMGT"[n]
        for r, direction in ((factor, "too large"), (1 / factor, "too small")):
            if math.isclose(ratio, r, rel_tol=0.01):
                return (f"your value is {direction} by {factor:.4g}, the factor between "
                        f"{prefix}B and {prefix}iB: a {prefix}B vs {prefix}iB mix-up "
                        f"(1 {prefix}B = 1000^{n} bytes, 1 {prefix}iB = 1024^{n} bytes): no credit")
    return ""


def _plain_hint(value: float, family: str, unit: str, unit_size: float, band) -> str:
    """For a plain number: the other unit of the same kind in which it would be right."""
    names = {"bytes": _BYTE_UNITS_SHOWN, "seconds": ("s", "ms", "us", "min", "h")}.get(family, ())
    for name in names:
        if name.lower() == _unit_key(unit):
            continue
        if band(value * _UNITS[name.lower()][1] / unit_size)[0] == 1.0:
            return (f"a plain number is read in {unit}; your number is right if read in "
                    f"{name}: write the unit")
    return ""


def _off(rel: float) -> str:
    if math.isinf(rel):
        return "off (the expected value is 0)"
    return f"{rel:.1%} off" if rel < 10 else f"{rel + 1:.3g} times too large"
