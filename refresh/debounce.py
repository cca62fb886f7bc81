"""The refresh hook (SPEC 5.3): debounce a gateway's notifications into one refresh.

`RefreshHook(adapter, gateway_id, debounce_seconds=0.5, max_delay_seconds=5.0)`
registers itself as a listener on the adapter. A `list_changed` notification
opens a pending refresh (or joins the one pending); each one restarts the
quiet window of `debounce_seconds`, and `max_delay_seconds` after the first
notification of a window the refresh fires even if the storm goes on. Firing
enqueues the Celery task `refresh.request_refresh` with trigger `event`,
widened to prompts and resources when their list changed.

What happens next is the scheduling work's, not a second mechanism: a
refresh request that finds the gateway's lease taken is coalesced through
the durable follow-up flag (`refresh.schedule.refresh_request`), so a
notification that arrives while that gateway's refresh runs leads to exactly
one more run after it.

Thread-safe throughout: notifications may arrive on any thread, `cancel()`
may be called from any thread, any number of times. The quiet window is
kept by one timer thread per hook, alive only while a refresh is pending
(a storm of notifications moves a deadline; it starts no threads).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

from refresh import metrics
from refresh.notifications import LIST_CHANGED_KINDS, NotificationAdapter

logger = logging.getLogger("toolsync.listener")

# A refresh that could not be enqueued (broker down) is retried, not dropped:
# 1 s, then doubling up to this.
_ENQUEUE_RETRY_MAX = 30.0


@dataclass(frozen=True)
class RefreshRequest:
    """One refresh the hook fired: what it covers and what it folded together."""

    gateway_id: int
    include_prompts: bool
    include_resources: bool
    notifications: int
    reason: str
    first_at: float
    fired_at: float


Enqueue = Callable[[RefreshRequest], None]


def enqueue_event_refresh(request: RefreshRequest) -> None:
    """Send `refresh.request_refresh` (trigger `event`) to the refresh queue."""
    from refresh.models import RefreshRun
    from refresh.tasks import request_refresh_task

    request_refresh_task.apply_async(
        kwargs={
            "gateway_id": request.gateway_id,
            "trigger": RefreshRun.Trigger.EVENT,
            "include_prompts": request.include_prompts,
            "include_resources": request.include_resources,
        }
    )


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    value = float(value)
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    if math.isinf(value):
        raise ValueError(f"{name} must be finite")
    return value


class RefreshHook:
    """Debounces one gateway's list_changed notifications into event refreshes.

    `refresh_count` counts refreshes fired (enqueued). `cancel()` drops a
    pending refresh and keeps listening; `close()` also unregisters from the
    adapter. `max_delay_seconds` smaller than `debounce_seconds` is allowed:
    it then bounds every window.
    """

    def __init__(
        self,
        adapter: NotificationAdapter,
        gateway_id: int,
        debounce_seconds: float = 0.5,
        max_delay_seconds: float = 5.0,
        *,
        enqueue: Enqueue = enqueue_event_refresh,
    ) -> None:
        self.debounce_seconds = _seconds("debounce_seconds", debounce_seconds)
        self.max_delay_seconds = _seconds("max_delay_seconds", max_delay_seconds)
        self.adapter = adapter
        self.gateway_id = gateway_id
        self._enqueue = enqueue
        self._cond = threading.Condition()
        # Everything below is guarded by `_cond`.
        self._pending = False
        self._first_at = 0.0
        self._deadline = 0.0
        self._kinds: set[str] = set()
        self._notifications = 0
        self._reason = "notification"
        self._retry_delay = 0.0
        self._not_before = 0.0
        # Bumped by cancel(): a request being enqueued when it was cancelled
        # is not put back if its enqueue fails.
        self._generation = 0
        self._thread: threading.Thread | None = None
        self._refresh_count = 0
        self._notification_count = 0
        self._closed = False
        adapter.add_notification_listener(self.on_notification)

    # -- state ---------------------------------------------------------------

    @property
    def refresh_count(self) -> int:
        """Refreshes fired so far."""
        with self._cond:
            return self._refresh_count

    @property
    def notification_count(self) -> int:
        """list_changed notifications received so far."""
        with self._cond:
            return self._notification_count

    @property
    def pending(self) -> bool:
        """Whether a refresh is waiting for its quiet window to pass."""
        with self._cond:
            return self._pending

    # -- input ---------------------------------------------------------------

    def on_notification(self, method: str, params: Mapping[str, Any]) -> None:
        """The adapter listener: list_changed opens or joins the pending refresh."""
        kind = LIST_CHANGED_KINDS.get(method)
        if kind is None:
            return  # other notifications (logging, progress, ...) are not ours
        metrics.notification_received(kind, self.gateway_id)
        with self._cond:
            self._notification_count += 1
        if self._arm({kind}, reason="notification", count=1):
            metrics.notification_coalesced(kind, self.gateway_id)

    def request_refresh(
        self, kinds: Iterable[str] = ("tools",), *, reason: str = "reconnect"
    ) -> None:
        """Ask for a refresh without a notification (e.g. after a reconnect).

        It goes through the same window, so it folds into notifications
        arriving around it.
        """
        self._arm({k for k in kinds if k in ("tools", "prompts", "resources")}, reason)

    def _arm(self, kinds: set[str], reason: str, count: int = 0) -> bool:
        """Open or join the pending refresh; True if it joined one (coalesced)."""
        with self._cond:
            if self._closed:
                return False
            now = time.monotonic()
            joined = self._pending
            if not joined:
                self._pending = True
                self._first_at = now
                self._notifications = 0
                self._reason = reason
            elif reason == "notification":
                self._reason = reason  # a real announcement names the window
            self._kinds |= kinds
            self._notifications += count
            # Each notification restarts the quiet window; the max delay,
            # counted from the window's first notification, caps it.
            self._deadline = max(
                min(
                    now + self.debounce_seconds,
                    self._first_at + self.max_delay_seconds,
                ),
                self._not_before,  # a failed enqueue's retry delay still holds
            )
            self._ensure_timer()
            self._cond.notify_all()
            return joined

    # -- control -------------------------------------------------------------

    def cancel(self) -> bool:
        """Drop the pending refresh, if any; True if one was pending.

        Safe from any thread, any number of times. The hook keeps listening:
        the next notification opens a new window.
        """
        with self._cond:
            was_pending = self._pending
            self._clear()
            self._generation += 1
            self._cond.notify_all()
            return was_pending

    def close(self, *, wait: bool = True) -> None:
        """Cancel, stop listening to the adapter, and let the timer thread end.

        `wait=False` returns at once (an event loop must not block on a timer
        thread that may be inside an enqueue).
        """
        self.adapter.remove_notification_listener(self.on_notification)
        with self._cond:
            self._closed = True
            self._clear()
            self._generation += 1
            self._cond.notify_all()
            thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _clear(self) -> None:
        self._pending = False
        self._kinds = set()
        self._notifications = 0
        self._retry_delay = 0.0
        self._not_before = 0.0

    # -- the timer thread ----------------------------------------------------

    def _ensure_timer(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run,
                name=f"refresh-hook-{self.gateway_id}",
                daemon=True,
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._pending:
                        # Exit under the lock: an `_arm` after this sees no
                        # thread and starts a new one.
                        self._thread = None
                        return
                    remaining = self._deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                request = RefreshRequest(
                    gateway_id=self.gateway_id,
                    include_prompts="prompts" in self._kinds,
                    include_resources="resources" in self._kinds,
                    notifications=self._notifications,
                    reason=self._reason,
                    first_at=self._first_at,
                    fired_at=time.monotonic(),
                )
                kinds, retry_delay = self._kinds, self._retry_delay
                generation = self._generation
                self._clear()
            # The enqueue is I/O: outside the lock, so notifications arriving
            # meanwhile open the next window instead of waiting.
            try:
                self._enqueue(request)
            except Exception:  # noqa: BLE001 - a broker outage must not lose the request
                retry_delay = min(_ENQUEUE_RETRY_MAX, max(1.0, retry_delay * 2))
                logger.warning(
                    "gateway %s: could not enqueue the event refresh; retrying in %g s",
                    self.gateway_id,
                    retry_delay,
                    exc_info=True,
                )
                self._requeue(request, kinds, retry_delay, generation)
                continue
            with self._cond:
                self._refresh_count += 1
            metrics.listener_refresh_fired(self.gateway_id, request.reason)
            logger.info(
                "gateway %s: event refresh enqueued (%s; %d notification(s) folded; "
                "prompts=%s resources=%s)",
                self.gateway_id,
                request.reason,
                request.notifications,
                request.include_prompts,
                request.include_resources,
            )

    def _requeue(
        self,
        request: RefreshRequest,
        kinds: set[str],
        retry_delay: float,
        generation: int,
    ) -> None:
        """Put a request that failed to enqueue back, merged with any newer one."""
        with self._cond:
            if self._closed or generation != self._generation:
                return  # cancelled while it was being sent
            now = time.monotonic()
            if not self._pending:
                self._pending = True
                self._first_at = request.first_at
                self._reason = request.reason
            self._not_before = now + retry_delay
            self._deadline = max(self._deadline, self._not_before)
            self._kinds |= kinds
            self._notifications += request.notifications
            self._retry_delay = retry_delay
            self._cond.notify_all()
