"""Long first-use steps (exporting a model into the cache) say what they do and how long they
usually take, and keep the dependencies' noise (torchvision, FutureWarning, LeafSpec, torch.onnx's
progress prints) away from the user; it stays available at DEBUG on the thresher logger."""

from __future__ import annotations

import contextlib
import io
import logging
import time
import warnings
from collections.abc import Iterator

log = logging.getLogger("thresher")
# Loggers of the export stack (and their children), held at ERROR during a long step.
NOISY_LOGGERS = ("transformers", "torch", "onnxscript", "onnx_ir", "accelerate", "peft")


def _noisy_loggers() -> list[logging.Logger]:
    # torch configures levels on its child loggers when imported, so the parents alone are not enough
    names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] in NOISY_LOGGERS]
    return [logging.getLogger(n) for n in sorted({*NOISY_LOGGERS, *names})]


@contextlib.contextmanager
def long_step(what: str, typical: str) -> Iterator[None]:
    """Announce `what` (at WARNING, so a plain API user sees it too), silence dependency output
    inside the block, and report the time taken."""
    log.warning("thresher: %s (done once; typically %s) ...", what, typical)
    t0 = time.perf_counter()
    with contextlib.suppress(ImportError):
        import torch  # noqa: F401  (the step needs it; imported first so its logger set-up is in place)
    saved = {logger: logger.level for logger in _noisy_loggers()}
    captured = io.StringIO()
    try:
        for logger in saved:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(captured):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in saved.items():
            logger.setLevel(level)
        if captured.getvalue():
            log.debug("output of %s:\n%s", what, captured.getvalue())
    log.warning("thresher: done in %.0f s", time.perf_counter() - t0)
