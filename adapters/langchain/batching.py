"""A request queue per local model that gathers concurrent generations into shared forward passes.

LangChain's ``batch``/``abatch`` (and any multi-threaded caller) issue one ``invoke`` per
thread. Each call submits a :class:`DecodeRequest`; the first caller to find the model
idle becomes the runner: it waits a moment for the other threads of the same burst,
takes every queued request (each keeps its own grammar and sampling settings), decodes
them together as one batch, hands each caller its result and repeats while requests
remain. Nobody else touches the model meanwhile, so concurrent calls are safe without a
dedicated thread. A batch that fails is retried request by request, so a bad request
fails alone.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

# Threads started together by a thread pool reach the scheduler within a few milliseconds
# of each other; this is how long the runner waits for them before starting a batch.
GATHER_SECONDS = 0.02
# Callers that announced themselves are still rendering their prompt or compiling their
# grammar; the runner waits for them, but never longer than this.
MAX_ANNOUNCED_WAIT_SECONDS = 5.0
MAX_BATCH = 16


@dataclass(eq=False)
class _Pending:
    request: Any  # surecall.adapters.transformers.decode.DecodeRequest
    future: Future = field(default_factory=Future)


class DecodeScheduler:
    """Serialises access to one model and batches requests that arrive together."""

    def __init__(self, local_model: Any, *, gather_seconds: float = GATHER_SECONDS, max_batch: int = MAX_BATCH):
        self._model_ref = weakref.ref(local_model)
        self._gather_seconds = gather_seconds
        self._max_batch = max_batch
        self._condition = threading.Condition()
        self._queue: list[_Pending] = []
        self._running = False
        self._announced = 0
        self.batches_run: list[int] = []  # sizes of the batches decoded so far (for inspection and tests)

    def announce(self) -> "_Slot":
        """Reserve a place in the next batch while the request is being prepared.

        ``with scheduler.announce() as slot: ...; result = slot.submit(request)``: a runner
        about to start a batch waits for announced callers, so concurrent calls whose
        preparation (prompt rendering, grammar compilation) takes a while still share it.
        A slot left without submitting is withdrawn when its ``with`` block ends.
        """
        with self._condition:
            self._announced += 1
        return _Slot(self)

    def submit(self, request: Any):
        """Decode ``request`` (a ``DecodeRequest``), possibly together with others; returns its ``DecodeResult``."""
        return self._submit(request, announced=False)

    def _submit(self, request: Any, *, announced: bool):
        request.validate()
        pending = _Pending(request)
        with self._condition:
            self._queue.append(pending)
            if announced:
                self._announced -= 1
            self._condition.notify_all()
            lead = not self._running
            if lead:
                self._running = True
        if lead:
            self._run_until_empty()
        return pending.future.result()

    def _withdraw(self) -> None:
        with self._condition:
            self._announced -= 1
            self._condition.notify_all()

    def _run_until_empty(self) -> None:
        try:
            time.sleep(self._gather_seconds)
            with self._condition:
                self._condition.wait_for(lambda: self._announced == 0, timeout=MAX_ANNOUNCED_WAIT_SECONDS)
            while True:
                with self._condition:
                    if not self._queue:
                        self._running = False
                        return
                    batch = self._take_batch()
                self._decode(batch)
        except BaseException as error:  # interrupted: nobody may be left waiting for a runner
            with self._condition:
                remaining, self._queue = self._queue, []
                self._running = False
            _raise_into(remaining, error)
            raise

    def _take_batch(self) -> list[_Pending]:
        batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
        return batch

    def _decode(self, batch: list[_Pending]) -> None:
        local_model = self._model_ref()
        try:
            if local_model is None:
                raise RuntimeError("the model behind this scheduler was released")
            from surecall.adapters.transformers.decode import run_requests

            with local_model.lock:
                results = run_requests(local_model, [pending.request for pending in batch])
            self.batches_run.append(len(batch))
        except Exception:
            if len(batch) == 1:
                _raise_into(batch, sys.exc_info()[1])
                return
            for pending in batch:
                self._decode([pending])
            return
        except BaseException as error:  # every waiting caller must hear about the interruption
            _raise_into(batch, error)
            raise
        for pending, result in zip(batch, results):
            pending.future.set_result(result)


class _Slot:
    """A caller's announced place in the scheduler; submitting or withdrawing releases it once."""

    def __init__(self, scheduler: DecodeScheduler):
        self._scheduler = scheduler
        self._open = True

    def submit(self, request: Any):
        if not self._open:
            raise RuntimeError("this slot was already used")
        self._open = False
        return self._scheduler._submit(request, announced=True)

    def withdraw(self) -> None:
        if self._open:
            self._open = False
            self._scheduler._withdraw()

    def __enter__(self) -> "_Slot":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.withdraw()


def _raise_into(batch: list[_Pending], error: BaseException) -> None:
    for pending in batch:
        if not pending.future.done():
            pending.future.set_exception(error)


_schedulers: "weakref.WeakKeyDictionary[Any, DecodeScheduler]" = weakref.WeakKeyDictionary()
_schedulers_lock = threading.Lock()


def scheduler_for(local_model: Any) -> DecodeScheduler:
    """The one scheduler of ``local_model`` (shared by every ChatSurecall using it)."""
    with _schedulers_lock:
        scheduler = _schedulers.get(local_model)
        if scheduler is None:
            scheduler = _schedulers[local_model] = DecodeScheduler(local_model)
        return scheduler
