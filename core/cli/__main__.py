"""``python -m tierlog.cli``: the same as the ``tierlog`` console script."""

from __future__ import annotations

import sys

from tierlog.cli import main

sys.exit(main())
