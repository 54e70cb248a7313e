"""``python -m threadkeeper.app.cli``: the ``threadkeeper`` command."""

import sys

from threadkeeper.app.cli import main

sys.exit(main())
