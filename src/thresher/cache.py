"""Where thresher keeps what it writes once and reuses: exported models, de-quantized GGUF
checkpoints, retrieval indexes. $THRESHER_HOME, else the platform's user cache folder
(~/.cache/thresher on Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    if os.environ.get("THRESHER_HOME"):
        return Path(os.environ["THRESHER_HOME"])
    import platformdirs

    return Path(platformdirs.user_cache_dir("thresher", appauthor=False))
