"""``python -m bertwatch ...``: the ``bertwatch`` command (so ``torchrun -m bertwatch run script.py`` works)."""

import sys

from bertwatch.cli import main

if __name__ == "__main__":
    sys.exit(main())
