"""``python -m streaming``: the same entry point as the ``connmon`` script."""

import sys

from streaming.cli import main

sys.exit(main())
