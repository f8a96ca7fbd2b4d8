"""``python -m memlab.tools.hostedcheck``: every solution notebook, run the way a hosted runtime runs it.

Used by: ``make test-compat`` (after it set up .venv-compat the way README.md's "Hosted notebook"
says: torch first, then the one documented ``pip install``), tests/measure/test_compat.py.

Checks, in the interpreter it runs in (the compat venv: Python 3.12, torch 2.14.1):

1. memlab is the *installed* package (site-packages), not the repository's src/ (a hosted
   runtime has no clone), and torch is still the version installed before the course (the
   course install must not replace the runtime's torch: ``--expect-torch``).
2. every ``solutions/*/*.ipynb`` runs top to bottom from a temporary copy (nothing of the
   repository beside it) in a kernel of this interpreter: no cell raises, and every graded test
   cell passes by nbgrader's rule (an error or anything on stderr scores 0); the solution's
   hidden tests run too, so this is stricter than the visible tests alone.
3. the first code cell printed the device banner (``ml.versions_banner``) with its ``compat``
   line saying this torch is supported.

Prints one line per notebook and a summary; exits 1 when anything failed.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

KERNEL_NAME = "memlab-compat"   # registered by make test-compat with --sys-prefix
BANNER_KEYS = ("python  ", "torch   ", "device  ", "CUDA    ", "compat  ")


def banner_problem(text: str, torch_version: str) -> str | None:
    """Why ``text`` (a first cell's stdout) is not the device banner of a supported torch."""
    for key in BANNER_KEYS:
        if not any(line.startswith(key) for line in text.splitlines()):
            return f"no {key.strip()!r} line in the first cell's output"
    if f"torch   {torch_version}" not in text:
        return f"the banner does not name torch {torch_version}"
    compat = next(line for line in text.splitlines() if line.startswith("compat  "))
    if "supported range" not in compat and "reference version" not in compat:
        return f"compat line does not say supported: {compat!r}"
    return None


def run(root: Path, expect_torch: str | None, cell_timeout: int, only: list[str]) -> int:
    import nbformat  # noqa: F401  (fail early with a clear error when the stand-in is missing)
    import torch

    import memlab
    from memlab.tools import gpucheck

    start = time.perf_counter()
    problems: list[str] = []
    where = Path(memlab.__file__).resolve()
    src = (root / "src").resolve()
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, memlab from {where.parent}")
    if src in where.parents:
        problems.append(f"memlab is imported from the repository ({where}), not from the installed "
                        "package: the course install did not happen or src/ is on sys.path")
    if expect_torch and torch.__version__.split("+")[0] != expect_torch:
        problems.append(f"torch is {torch.__version__}, expected the runtime's {expect_torch}: the "
                        "course install replaced torch")
    torch_version = torch.__version__
    notebooks = gpucheck.solution_notebooks(root)
    if only:
        notebooks = [p for p in notebooks if any(o in p.parent.name for o in only)]
    if not notebooks:
        problems.append(f"no solutions/*/*.ipynb under {root}")
    for path in notebooks:
        rec = gpucheck.run_notebook(path, cell_timeout=cell_timeout, kernel_name=KERNEL_NAME)
        tests = rec["graded_tests"]
        bad = [t for t in tests if not t["passed"]]
        nb_problems = []
        if rec["crash"]:
            nb_problems.append(f"crashed: {rec['crash']}")
        nb_problems += [f"cell {e['cell']}: {e['error']}" for e in rec["errors"]]
        nb_problems += [f"test {t['grade_id']}: {t['problem']}" for t in bad]
        banner = rec["first_cell_stdout"]
        why = banner_problem(banner, torch_version)
        if why:
            nb_problems.append(why)
        status = "PASS" if not nb_problems else "FAIL"
        print(f"[{status}] {rec['notebook']}: {len(tests) - len(bad)}/{len(tests)} graded test cells "
              f"pass, {rec['seconds']} s", flush=True)
        if not nb_problems and path == notebooks[0]:
            print("       first cell printed:\n" + "\n".join(f"         {line}" for line in banner.splitlines()))
        elif not nb_problems:
            compat = next((line for line in banner.splitlines() if line.startswith("compat  ")), "")
            print(f"       first cell: {compat.strip()}")
        for p in nb_problems:
            print(f"       {p}")
        problems += [f"{rec['notebook']}: {p}" for p in nb_problems]
    took = time.perf_counter() - start
    print(f"{len(notebooks)} notebooks in {took:.0f} s; "
          + ("all passed" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="the repository (holds solutions/)")
    ap.add_argument("--expect-torch", default=None, help="torch version installed before the course")
    ap.add_argument("--cell-timeout", type=int, default=600)
    ap.add_argument("--notebook", action="append", default=[], help="run only these (substring)")
    args = ap.parse_args(argv)
    return run(args.root.resolve(), args.expect_torch, args.cell_timeout, args.notebook)


if __name__ == "__main__":
    sys.exit(main())
