"""`python -m nettrail ...`: the same as the `nettrail` command (nettrail/cli.py)."""

from __future__ import annotations

import sys

from nettrail.cli import main

if __name__ == "__main__":
    sys.exit(main())
