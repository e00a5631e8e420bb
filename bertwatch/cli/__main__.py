"""``python -m bertwatch.cli ...``: the ``bertwatch`` command, for launchers that take a module (accelerate -m)."""

import sys

from bertwatch.cli import main

sys.exit(main())
