"""Hidden tests judged in a process that never runs learner code: the judge.

Used by: :mod:`memlab.autograde.security.verdict` (the re-run of every job's notebooks),
tests/grading/test_judge.py.

The re-run (:mod:`.verdict`) executes a notebook's cells in a fresh sandboxed process; its
answer cells are the learner's code, so a test run in that process runs beside the code it
judges. For the exercises whose function takes and returns plain data (numbers, strings,
dtypes, tensors, the course's records: :mod:`.channel`), the assignment names the test cells
the judge runs instead (``Assignment.judged`` in :mod:`memlab.grading.assignments`):

- the learner's process (the *worker*) runs its cells as before, but a judged test cell is
  never sent to it (its source, hidden tests included, never enters the learner's process);
  where the cell stood, the worker announces the point it has reached and then only answers
  calls: ``{"call": name, "args", "kwargs"}`` -> the result, or the exception's type and
  message, with what the call wrote to stdout and stderr and any argument it changed in place;
- the judge (a fresh Python, started by the grader, that imports only the course) runs the
  judged cell's trusted source from the gradebook, with the learner's names bound to proxies
  that call the worker, and the locked cells that cell reads from (found by their names, and
  re-run here from the gradebook's source: their values are the judge's, not the worker's).
  It decides the cell's score by nbgrader's rule (:func:`.cells.score`) and reports it on a
  pipe only the grader reads. What the learner's call wrote to stderr counts as the cell's
  stderr (nbgrader scores such a cell 0 too); an argument it changed is changed here as well,
  so "leaves its input unchanged" is still checked; an exception arrives as the nearest
  built-in class of its kind (``ValueError``, ``RuntimeError``, ``torch.OutOfMemoryError``...)
  under its own name.

What the worker can still do is what the learner's function does: return any plain value for
any arguments. It cannot reach the test, its reference values, its frames or its verdict.

Channel: two named pipes in the worker's folder (``to_judge.fifo``, ``from_judge.fifo``), made
by the grader before either process starts; the worker opens them before any learner code and
removes them.
"""
from __future__ import annotations

import builtins
import os
import sys
import time
from typing import Any, Mapping

from memlab.autograde.security import channel

__all__ = ["split", "reads", "binds", "main", "serve", "FIFOS"]

FIFOS = ("to_judge.fifo", "from_judge.fifo")

# exceptions that cross as themselves (a learner's subclass arrives as a subclass of the first
# of these in its MRO, under its own name)
_PASSING = ("StopIteration", "ArithmeticError", "ZeroDivisionError", "OverflowError",
            "AssertionError", "AttributeError", "LookupError", "IndexError", "KeyError",
            "NameError", "NotImplementedError", "RecursionError", "RuntimeError", "TypeError",
            "ValueError", "UnicodeError", "MemoryError", "OSError", "Exception")


# ------------------------------------------------------------------ which cells, which names

def _table(source: str):
    import symtable

    try:
        return symtable.symtable(source, "<cell>", "exec")
    except (SyntaxError, ValueError):
        return None


def binds(source: str) -> set[str]:
    """Names a cell binds in the notebook's namespace (assignments, defs, classes, imports, loop
    and ``with`` targets at its top level; a function's own locals are not)."""
    top = _table(source)
    if top is None:
        return set()
    out = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    todo = list(top.get_children())
    while todo:  # `global x` in a function, assigned there
        t = todo.pop()
        todo.extend(t.get_children())
        out |= {s.get_name() for s in t.get_symbols() if s.is_declared_global() and s.is_assigned()}
    return out


def reads(source: str) -> set[str]:
    """Names a cell reads from the notebook's namespace: at its top level, or as a global
    inside its functions, classes and comprehensions."""
    top = _table(source)
    if top is None:
        return set()
    out = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    todo = list(top.get_children())
    while todo:
        t = todo.pop()
        todo.extend(t.get_children())
        out |= {s.get_name() for s in t.get_symbols() if s.is_global() and s.is_referenced()}
    return out


def split(program: list[dict], judged: Mapping[str, tuple[str, ...]]
          ) -> tuple[list[dict], list[dict]]:
    """(the worker's program, the judge's cells) of ``program`` (:func:`.verdict.program_of`).

    Every test cell named in ``judged`` (grade_id -> the learner's names it calls) moves to the
    judge; the worker's copy keeps its place as ``{"kind": "judged"}`` without its source. The
    locked cells a judged cell reads from (the last locked cell before it that binds a name it
    reads, and so on for what that cell reads) run in the judge too, at their place: the
    worker runs its own copy and then waits there (``"sync": True``). Each judge cell carries
    ``"at"``, its position in the order both sides meet."""
    learner = {n for gid, names in judged.items() for n in names}
    moving = [i for i, c in enumerate(program) if c["kind"] == "test" and c["grade_id"] in judged]
    if not moving:
        return program, []
    needed_at: set[int] = set(moving)
    for i in moving:
        want = reads(program[i]["source"]) - set(judged[program[i]["grade_id"]])
        for j in range(i - 1, -1, -1):
            c = program[j]
            if c["kind"] != "locked":
                continue
            got = binds(c["source"]) & want
            if got:
                needed_at.add(j)
                want = (want - got) | (reads(c["source"]) - learner - binds(c["source"]))
    worker, judge_cells = [], []
    for i, c in enumerate(program):
        if i not in needed_at:
            worker.append(c)
            continue
        at = len(judge_cells)
        if c["kind"] == "test":
            names = list(judged[c["grade_id"]])
            worker.append({"kind": "judged", "grade_id": c["grade_id"], "source": "",
                           "points": c["points"], "at": at})
        else:
            names = sorted(learner)
            worker.append({**c, "sync": True, "at": at})
        judge_cells.append({**c, "at": at, "names": names})
    return worker, judge_cells


# ------------------------------------------------------------------ the worker's side

_WORKER_ENCODER = None


def serve(tx: int, rx: int, ns: dict, at: int, grade_id: str | None, call) -> bool:
    """In the learner's process: say that cell ``at`` is reached, then answer the judge until it
    says resume. ``call(fn, args, kwargs)`` runs one call of the learner's code (captured:
    returns (ok, value or exception, stdout, stderr)). False when the channel failed (the
    judge's cells after this one get no answers)."""
    global _WORKER_ENCODER
    if _WORKER_ENCODER is None:  # one for the whole run: the judge numbers what it was sent
        _WORKER_ENCODER = channel.Encoder(remember=True)
    enc, dec = _WORKER_ENCODER, channel.Decoder()
    try:
        channel.send(tx, {"at": at, "grade_id": grade_id})
        while True:
            msg = channel.recv(rx)
            if type(msg) is not dict:
                return False
            if msg.get("resume") is True:
                return True
            if "names" in msg and type(msg["names"]) is list:
                reply = {}
                for name in msg["names"]:
                    if type(name) is not str:
                        continue
                    if name not in ns:
                        reply[name] = {"missing": True}
                    elif callable(ns[name]):
                        reply[name] = {"call": True}
                    else:
                        reply[name] = {"value": _encode_or_opaque(enc, ns[name])}
                channel.send(tx, {"names": reply})
                continue
            if type(msg.get("call")) is not str:
                return False
            name = msg["call"]
            args, kwargs = dec.decode(msg.get("args")), dec.decode(msg.get("kwargs"))
            if type(args) is not list or type(kwargs) is not dict:
                return False
            before = channel.send_form(msg.get("args")), channel.send_form(msg.get("kwargs"))
            fn = ns.get(name)
            if not callable(fn):
                ok, value, out, err = False, NameError(f"name {name!r} is not defined"), "", ""
            else:
                ok, value, out, err = call(fn, args, kwargs)
            plain = channel.Encoder()
            after = [plain.encode(args), plain.encode(kwargs)]
            reply = {"out": out[-65536:], "err": err[-65536:], "seq": msg.get("seq")}
            if [channel.send_form(x) for x in after] != list(before):
                reply["after"] = after
            if ok:
                reply["ok"] = _encode_or_opaque(enc, value)
            else:
                reply["raise"] = _exception_data(value)
            channel.send(tx, reply)
    except (channel.ChannelError, OSError, ValueError, TypeError):
        return False


def _encode_or_opaque(enc, value):
    try:
        return enc.encode(value)
    except channel.ChannelError as exc:
        return {"opaque": "unsendable", "repr": str(exc)[:200]}


def _exception_data(exc: BaseException) -> dict:
    t = type(exc)
    bases = [f"{k.__module__}.{k.__qualname__}" for k in t.__mro__]
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001
        text = ""
    return {"type": f"{t.__module__}.{t.__qualname__}"[:200], "bases": bases[:20],
            "msg": text[:2000]}


# ------------------------------------------------------------------ the judge's side

class _Judged(Exception):
    """The channel failed while a judged cell ran: the cell scores 0 and the judge stops."""


class _Link:
    """The judge's end of the channel."""

    def __init__(self, rx: int, tx: int, cell_timeout: float):
        self.rx, self.tx, self.cell_timeout = rx, tx, cell_timeout
        self.dec = channel.Decoder()
        self.enc = channel.Encoder()
        self.broken = ""
        self.seq = 0

    def names(self, names: list[str]) -> dict:
        self._send({"names": names})
        reply = self._recv()
        got = reply.get("names") if type(reply) is dict else None
        if type(got) is not dict:
            raise self._fail("the learner's process answered the names with something else")
        return got

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        self.seq += 1
        data = {"call": name, "args": self.enc.encode(list(args)),
                "kwargs": self.enc.encode(kwargs), "seq": self.seq}
        self._send(data)
        reply = self._recv()
        # the answer to a call this cell gave up on (its time ran out) arrives late: skip it
        while type(reply) is dict and type(reply.get("seq")) is int and reply["seq"] < self.seq:
            reply = self._recv()
        if type(reply) is not dict or reply.get("seq") != self.seq:
            raise self._fail("the learner's process answered with something else")
        sys.stdout.write(str(reply.get("out", ""))[-65536:])
        err = str(reply.get("err", ""))
        if err:
            sys.stderr.write(err[-65536:])
        if "after" in reply:
            after = reply["after"]
            if type(after) is not list or len(after) != 2:
                raise self._fail("the learner's process sent a malformed argument")
            _write_back(list(args), after[0], self.dec)
            _write_back(kwargs, after[1], self.dec)
        if "ok" in reply:
            try:
                return self.dec.decode(reply["ok"])
            except channel.ChannelError as exc:
                raise self._fail(f"the learner's result could not be read: {exc}") from None
        raise _rebuild(reply.get("raise"))

    def _send(self, obj) -> None:
        if self.broken:
            raise _Judged(self.broken)
        try:
            channel.send(self.tx, obj)
        except (OSError, channel.ChannelError) as exc:
            raise self._fail(f"the learner's process went away ({exc})") from None

    def _recv(self):
        if self.broken:
            raise _Judged(self.broken)
        try:
            return channel.recv(self.rx, time.monotonic() + self.cell_timeout + 5)
        except (OSError, channel.ChannelError) as exc:
            raise self._fail(f"the learner's process: {exc}") from None

    def _fail(self, why: str) -> _Judged:
        self.broken = why
        return _Judged(why)


def _write_back(orig: Any, data: Any, dec: channel.Decoder) -> None:
    """Change ``orig`` (what the judge passed) in place into ``data`` (what the learner's call
    left of it), as an in-place change in the learner's kernel would have."""
    new = dec.decode(data)
    _assign(orig, new, 0)


def _assign(orig: Any, new: Any, depth: int) -> None:
    import torch

    if depth > channel.MAX_DEPTH:
        return
    if isinstance(orig, torch.Tensor) and isinstance(new, torch.Tensor):
        if orig.shape == new.shape and orig.dtype == new.dtype:
            if not torch.equal(orig.detach().cpu(), new.detach().cpu()):
                with torch.no_grad():
                    orig.copy_(new.to(orig.device))
        else:
            with torch.no_grad():
                orig.set_(new.detach().to(orig.device))
    elif type(orig) is list and type(new) is list:
        if len(orig) == len(new):
            for i, (a, b) in enumerate(zip(orig, new)):
                if isinstance(a, (list, dict, torch.Tensor)):
                    _assign(a, b, depth + 1)
                elif not (type(a) is type(b) and a == b):
                    orig[i] = b
        else:
            orig[:] = new
    elif type(orig) is dict and type(new) is dict:
        for k in [k for k in orig if k not in new]:
            del orig[k]
        for k, b in new.items():
            a = orig.get(k)
            if k in orig and isinstance(a, (list, dict, torch.Tensor)):
                _assign(a, b, depth + 1)
            else:
                orig[k] = b


def _rebuild(data: Any) -> BaseException:
    """The judge's copy of the learner's exception: the nearest class of :data:`_PASSING` (or
    torch's out-of-memory error) in its MRO, subclassed under the learner's name."""
    if type(data) is not dict:
        return RuntimeError("the learner's function failed")
    import torch

    known = {f"builtins.{n}": getattr(builtins, n) for n in _PASSING}
    known["torch.OutOfMemoryError"] = torch.OutOfMemoryError
    known["torch.cuda.OutOfMemoryError"] = torch.OutOfMemoryError
    bases = [b for b in data.get("bases", []) if type(b) is str and b in known]
    base = known[bases[0]] if bases else Exception
    name = str(data.get("type", "Exception")).rsplit(".", 1)[-1][:80]
    msg = str(data.get("msg", ""))[:2000]
    if name == base.__name__ or not name.isidentifier():
        cls = base
    else:
        cls = type(name, (base,), {"__module__": "learner"})
    try:
        return cls(msg)
    except Exception:  # noqa: BLE001  a base whose constructor wants more
        return RuntimeError(f"{name}: {msg}")


def _proxy(link: _Link, name: str):
    def learner_function(*args, **kwargs):
        return link.call(name, args, kwargs)

    learner_function.__name__ = learner_function.__qualname__ = name
    return learner_function


def main(argv: list[str] | None = None) -> None:
    """``python -P -c 'from memlab.autograde.security.judge import main; main()'
    --report-fd N --cell-timeout S --memory-mb M --folder DIR judge.json``: imports the course,
    says ready, opens the channel in DIR (the worker's folder), then runs its cells as the
    worker reaches them."""
    import json

    from memlab.autograde.security import cells as run
    from memlab.autograde.security.kernel import course_only_path

    course_only_path()
    args = list(sys.argv[1:] if argv is None else argv)
    opts = {}
    while args and args[0].startswith("--"):
        flag = args.pop(0)[2:]
        opts[flag] = args.pop(0)
    [path] = args
    run.limit_process(int(opts.get("memory-mb", 0)))
    cell_timeout = float(opts.get("cell-timeout", 300))
    report = run.Report(int(opts["report-fd"]))
    import torch  # noqa: F401  the course, as the notebooks import it

    import memlab  # noqa: F401
    import memlab.grading.guard  # noqa: F401

    with open(path, encoding="utf-8") as f:
        loaded = json.load(f)
    report.key = bytes.fromhex(loaded["key"])
    cells = loaded["cells"]
    ns = run.fresh_namespace()
    report.send({"ready": True})
    folder = opts["folder"]
    rx = os.open(os.path.join(folder, FIFOS[0]), os.O_RDONLY)
    tx = os.open(os.path.join(folder, FIFOS[1]), os.O_WRONLY)
    link = _Link(rx, tx, cell_timeout)
    n = 0
    for cell in cells:
        try:
            msg = channel.recv(rx)
            while type(msg) is dict and type(msg.get("seq")) is int and msg["seq"] <= link.seq:
                msg = channel.recv(rx)  # a late answer to the cell before
        except (OSError, channel.ChannelError):
            break
        if type(msg) is not dict or msg.get("at") != cell["at"] \
                or msg.get("grade_id") != cell["grade_id"]:
            break
        try:
            for name, kind in link.names(cell["names"]).items():
                if name not in cell["names"] or type(kind) is not dict:
                    continue
                if kind.get("call") is True:
                    ns[name] = _proxy(link, name)
                elif "value" in kind:
                    ns[name] = link.dec.decode(kind["value"])
                else:
                    ns.pop(name, None)
        except (_Judged, channel.ChannelError):
            break
        label = f"<cell {cell['grade_id'] or cell['kind']}>"
        # longer than the worker's own limit on each call, whose timeout is the better message
        error, value, out, err = run.run_cell(cell["source"], ns, label, cell_timeout + 10)
        if link.broken:
            error = error or "the learner's process stopped answering"
        if cell["kind"] == "test":
            s, why = run.score(float(cell["points"]), error, err, value)
            report.send({"n": n, "grade_id": cell["grade_id"], "score": s,
                         "why": (f"judged outside the learner's process: {why}" if why else "")})
            n += 1
        if link.broken:
            break
        try:
            channel.send(tx, {"resume": True})
        except (OSError, channel.ChannelError):
            break
    else:
        report.send({"done": True})
    report.close()
    os._exit(0)
