"""The batcher: one task that takes batches from the queue and runs them on the engine.

Batches run one at a time in a single worker thread (ONNX Runtime already spreads one call over
every core; two concurrent calls would only contend). While a batch runs, new requests pile up
in the queue and form the next batch: that is the dynamic batching.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from thresher.compressor import Compressor
from thresher.engine.request import Request
from thresher.engine.result import CompressionResult
from thresher.server.errors import ServiceError
from thresher.server.metrics import Metrics
from thresher.server.queue import Entry, Queue
from thresher.server.settings import Settings

log = logging.getLogger("thresher.server")


@dataclass(frozen=True)
class Outcome:
    """What a request's future resolves to: its result and where/when it was computed."""

    result: CompressionResult
    batch_id: int
    batch_size: int
    batch_slot: int  # position in its batch
    queue_ms: float  # enqueued -> its batch started
    inference_ms: float  # its batch's engine time


class Batcher:
    def __init__(self, compressor: Compressor, queue: Queue, settings: Settings, metrics: Metrics):
        self.compressor = compressor
        self.queue = queue
        self.settings = settings
        self.metrics = metrics
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="thresher-infer")
        self._batch_ids = itertools.count(1)
        self._task: asyncio.Task | None = None
        self._busy = False
        self.seconds_per_token = 0.0  # moving average over recent batches; 0 until one has run
        self.last_success: float | None = None  # time.monotonic() of the last batch with a result

    def estimated_queue_wait_s(self) -> float:
        """How long the queued work would take at the recent pace."""
        return self.queue.tokens * self.seconds_per_token

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="thresher-batcher")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def idle(self) -> bool:
        return not self._busy and not len(self.queue)

    async def stop(self, drain_timeout_s: float) -> None:
        """Finish what is queued or running (up to drain_timeout_s), then stop the task and thread."""
        deadline = time.monotonic() + drain_timeout_s
        while not self.idle and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=True)

    def _on_drop(self, entry: Entry) -> None:
        self.metrics.dropped.labels(entry.cancel_reason).inc()
        self.metrics.queue_size.set(len(self.queue))

    async def _loop(self) -> None:
        s = self.settings
        while True:
            batch = await self.queue.next_batch(s.max_batch_tokens, s.max_batch_requests,
                                                s.max_wait_ms / 1e3, self._on_drop)
            self._busy = True
            try:
                await self._run(batch)
            except Exception:  # never let one batch kill the loop; its futures got their errors
                log.exception("batch failed")
            finally:
                self._busy = False

    async def _run(self, batch: list[Entry]) -> None:
        loop = asyncio.get_running_loop()
        batch_id = next(self._batch_ids)
        started = time.perf_counter()
        self.metrics.queue_size.set(len(self.queue))
        self.metrics.batch_requests.observe(len(batch))
        self.metrics.batch_tokens.observe(sum(e.tokens for e in batch))
        for e in batch:
            self.metrics.stage_duration.labels("queue").observe(started - e.enqueued)
        requests = [e.request for e in batch]
        try:
            outcomes: list[CompressionResult | ServiceError] = list(
                await loop.run_in_executor(self._executor, self.compressor.compress_validated, requests))
        except Exception:
            # One bad request must not fail its batch-mates: rerun them one by one.
            outcomes = [await loop.run_in_executor(self._executor, self._run_one, r) for r in requests]
        inference_ms = (time.perf_counter() - started) * 1e3
        pace = inference_ms / 1e3 / max(1, sum(e.tokens for e in batch))
        self.seconds_per_token = pace if not self.seconds_per_token else 0.7 * self.seconds_per_token + 0.3 * pace
        self.metrics.stage_duration.labels("inference").observe(inference_ms / 1e3)
        first = next((o for o in outcomes if isinstance(o, CompressionResult)), None)
        if first is not None:
            self.last_success = time.monotonic()
            for stage, ms in first.timings_ms.items():
                if stage != "total":
                    self.metrics.stage_duration.labels(stage).observe(ms / 1e3)
        for slot, (entry, outcome) in enumerate(zip(batch, outcomes)):
            if entry.future.done():  # client left or deadline passed while the batch ran
                continue
            if isinstance(outcome, ServiceError):
                entry.future.set_exception(outcome)
            else:
                entry.future.set_result(Outcome(outcome, batch_id, len(batch), slot,
                                                (started - entry.enqueued) * 1e3, inference_ms))

    def _run_one(self, request: Request) -> CompressionResult | ServiceError:
        try:
            return self.compressor.compress_validated([request])[0]
        except (TypeError, ValueError) as e:
            return ServiceError("validation", str(e))
        except Exception as e:
            log.exception("request failed")
            return ServiceError("internal", f"{type(e).__name__}: {e}")
