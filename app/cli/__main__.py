"""``python -m app.cli``: the command line, as the ``quickdraft`` console script runs it."""

import sys

from app.cli import main

sys.exit(main())
