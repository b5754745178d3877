"""Where the test session copies logs worth keeping: `$TOWLINE_TEST_LOGS`, else `<tmp>/towline-test-logs`.

Two checkouts testing on one machine set TOWLINE_TEST_LOGS apart so neither overwrites the other's logs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def kept_logs_root() -> Path:
    root = Path(os.environ.get("TOWLINE_TEST_LOGS") or Path(tempfile.gettempdir()) / "towline-test-logs")
    root.mkdir(parents=True, exist_ok=True)
    return root
