"""What keeps learner code in its box: the static audit, the Landlock (``landlock``) and
bubblewrap (``bwrap``) sandboxes, the grader's kernel launcher and the verdict re-run outside
the learner's kernel. Imports nothing of :mod:`memlab.autograde.batch`."""
