"""Record sinks: where the collector sends its records (stdout via xo, files, the webapp over HTTP).

Each sink module stands alone; keep in sync with docs/collector-sinks.md.
"""

from __future__ import annotations
