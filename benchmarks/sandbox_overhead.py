"""Seconds per submission of grade-class with and without its sandbox, per assignment.

In a temporary copy of the course, one honest submission of each chosen assignment (the
solution's answer cells in the released notebook) is graded with 1 worker, sandboxed and
unsandboxed (``GradeSettings.sandbox``; ``--sandbox`` picks which sandbox: Landlock on warm
forks where usable, the default, or bubblewrap), alternating per assignment so that machine load hits
both alike. Prints seconds, scores and the ratio per assignment, and how much of each is the verdict re-run
outside the learner's kernel (memlab.autograde.security.verdict) (one run each: the numbers
depend on the machine and its load). Not a test.

    .venv/bin/python benchmarks/sandbox_overhead.py                  # every assignment
    .venv/bin/python benchmarks/sandbox_overhead.py --assignments 00_setup,02_checkpointing
    .venv/bin/python benchmarks/sandbox_overhead.py --sandbox bwrap   # the bubblewrap sandbox
"""
from __future__ import annotations

import argparse
import copy
import re
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

from memlab.autograde.batch.grade_class import GradeSettings, grade_class

from _course import released_course  # benchmarks/

ROOT = Path(__file__).resolve().parents[1]
MARK = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


def _gid(c):
    return c.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignments", default="all")
    parser.add_argument("--sandbox", choices=("auto", "landlock", "bwrap"), default="auto")
    args = parser.parse_args()
    names = (sorted(p.name for p in (ROOT / "solutions").iterdir() if any(p.glob("*.ipynb")))
             if args.assignments == "all" else args.assignments.split(","))
    from memlab.autograde.batch.runner import sandbox_mode

    kind, why = sandbox_mode({"sandbox_kind": args.sandbox})
    if not kind:
        sys.exit(f"no sandbox usable ({why}): nothing to compare")
    why = f"{kind}: {why}"
    tmp = Path(tempfile.mkdtemp(prefix="memlab-sbx-bench-"))
    try:
        course = tmp / "course"
        config = released_course(course, names)
        rows = []
        for a in names:
            [rel_path] = sorted((course / "notebooks" / a).glob("*.ipynb"))
            nb = nbformat.read(rel_path, as_version=4)
            sol = nbformat.read(course / "solutions" / a / rel_path.name, as_version=4)
            answers = {_gid(c): c.source for c in sol.cells if c.metadata.get("nbgrader", {}).get("solution")}
            nb = copy.deepcopy(nb)
            for c in nb.cells:
                if _gid(c) in answers:
                    c.source = "\n".join(line for line in answers[_gid(c)].splitlines() if not MARK.match(line))
            secs = {}
            for mode in (True, False):
                student = f"{'sbx' if mode else 'plain'}_{a[:2]}"
                folder = tmp / f"class_{student}" / student / a
                folder.mkdir(parents=True)
                nbformat.write(nb, folder / rel_path.name)
                rep = grade_class(folder.parent.parent, config_path=config, out=tmp / f"rep_{student}",
                                  settings=GradeSettings(workers=1, sandbox=mode, sandbox_kind=args.sandbox,
                                                         submission_timeout=900),
                                  progress=False)
                [r] = rep.results
                secs[mode] = (r["seconds"], r["score"], r["max_score"],
                              float((r.get("timings") or {}).get("verdict") or 0))
            s, p = secs[True], secs[False]
            rows.append((a, s, p))
            print(f"{a:24s} sandboxed {s[0]:6.1f} s ({s[1]:g}/{s[2]:g})  unsandboxed {p[0]:6.1f} s "
                  f"({p[1]:g}/{p[2]:g})  ratio {s[0] / max(p[0], 1e-9):.2f}  (verdict re-run, beside the kernel: "
                  f"{s[3]:.1f} s / {p[3]:.1f} s of it)", flush=True)
        tot_s = sum(r[1][0] for r in rows)
        tot_p = sum(r[2][0] for r in rows)
        print(f"{'all':24s} sandboxed {tot_s:6.1f} s  unsandboxed {tot_p:6.1f} s  ratio {tot_s / max(tot_p, 1e-9):.2f}"
              f"  ({why})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
