"""``python -m memlab.autograde release|autograde|feedback|export|reviews|grade-class``."""
import sys

from memlab.autograde.cli import main

sys.exit(main())
