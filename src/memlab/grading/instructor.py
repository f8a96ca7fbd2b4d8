"""The instructor's commands under their old name: ``python -m memlab.grading.instructor``.

Kept so that scripts and notes written before the split keep working; the commands live in
:mod:`memlab.autograde.cli` (``python -m memlab.autograde``). No learner's kernel imports this
module; it is the one declared exception of the learner/instructor contract (pyproject.toml).
"""
import sys

if __name__ == "__main__":
    from memlab.autograde.cli import main

    sys.exit(main())
