"""The bounded request queue: `append` and `next_batch`, nothing else.

Its state (a deque) is touched only from the event loop's thread: handlers append, the one
batcher task takes batches. asyncio runs one callback at a time, so no lock is needed and no
other code reaches into the deque (TEI gets the same single-owner property from a background
thread serving Append/NextBatch commands).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from thresher.engine.request import Request

CHARS_PER_TOKEN = 4  # cheap pre-tokenization estimate (English WordPiece averages ~4-5 chars/token)
TOKENS_PER_PASSAGE = 4  # [CLS]/[SEP] and sentence-boundary overhead per passage


def estimate_tokens(request: Request) -> int:
    """Token cost of a request for the batch budget, from characters (no tokenizer call)."""
    chars = len(request.question) + sum(len(p.text) for p in request.passages)
    return math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_PASSAGE * (len(request.passages) + 1)


@dataclass(eq=False)
class Entry:
    """One engine request waiting for the model. The handler owns `future`: it cancels it when the
    client goes away or the deadline passes (setting `cancel_reason` first), and the queue then
    drops the entry instead of computing it."""

    request: Request
    future: asyncio.Future
    tokens: int
    enqueued: float = field(default_factory=time.perf_counter)
    cancel_reason: str = "cancelled"


class QueueFull(Exception):
    pass


class Queue:
    def __init__(self, max_size: int):
        self.max_size = max_size
        self._entries: deque[Entry] = deque()
        self._arrived = asyncio.Event()
        self.tokens = 0  # estimated tokens of everything queued

    def __len__(self) -> int:
        return len(self._entries)

    def append(self, entries: list[Entry]) -> None:
        """Enqueue all of `entries` or none: raises QueueFull when they do not fit."""
        if len(self._entries) + len(entries) > self.max_size:
            raise QueueFull(f"the queue holds {len(self._entries)} of {self.max_size} requests; "
                            f"{len(entries)} more do not fit")
        self._entries.extend(entries)
        self.tokens += sum(e.tokens for e in entries)
        self._arrived.set()

    async def next_batch(self, max_tokens: int, max_requests: int, max_wait_s: float,
                         on_drop: Callable[[Entry], None]) -> list[Entry]:
        """The oldest live entries under `max_tokens` (estimated) and `max_requests`.

        Waits for the first entry, then up to `max_wait_s` for the batch to fill. Entries whose
        future is already done (client gone, deadline passed) are removed and passed to on_drop.
        A single entry over the token budget forms a batch of its own.
        """
        while True:
            while not self._entries:
                self._arrived.clear()
                await self._arrived.wait()
            deadline = time.monotonic() + max_wait_s
            while not self._full(max_tokens, max_requests):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except TimeoutError:
                    break
            batch, tokens = [], 0
            while self._entries and len(batch) < max_requests:
                entry = self._entries[0]
                if entry.future.done():
                    self._entries.popleft()
                    self.tokens -= entry.tokens
                    on_drop(entry)
                    continue
                if batch and tokens + entry.tokens > max_tokens:
                    break
                batch.append(self._entries.popleft())
                self.tokens -= entry.tokens
                tokens += entry.tokens
            if batch:
                return batch

    def _full(self, max_tokens: int, max_requests: int) -> bool:
        count = tokens = 0
        for entry in self._entries:
            if entry.future.done():
                continue
            count += 1
            tokens += entry.tokens
            if count >= max_requests or tokens >= max_tokens:
                return True
        return False
