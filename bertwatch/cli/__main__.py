"""``python -m bertwatch.cli COMMAND ...`` (also under ``torchrun`` / ``accelerate launch -m``)."""

import sys

from bertwatch.cli import main

sys.exit(main())
