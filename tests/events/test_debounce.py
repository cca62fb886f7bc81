"""The refresh hook alone (SPEC 5.3): debounce, reset, max delay, cancel, threads.

No network and no broker: the hook's `enqueue` is replaced by a recorder, so
these tests see exactly what would be sent. Timing assertions are lower
bounds and orderings (a timer never fires early), never tight upper bounds.
"""

from __future__ import annotations

import math
import threading
import time

import pytest

from refresh import metrics
from refresh.debounce import RefreshHook, RefreshRequest, enqueue_event_refresh
from refresh.notifications import (
    PROMPTS_LIST_CHANGED,
    RESOURCES_LIST_CHANGED,
    TOOLS_LIST_CHANGED,
    NotificationAdapter,
)
from refresh.probe import ProbeTarget
from tests.schedule.test_metrics import delta
from tests.schedule.test_metrics import scrape_without_db as scrape

# A generous bound for "eventually": a loaded 2-core CI box can be slow.
EVENTUALLY = 10.0


class Recorder:
    """Stands in for the Celery enqueue; records each request and when it came."""

    def __init__(self, fail_times: int = 0) -> None:
        self.requests: list[RefreshRequest] = []
        self.lock = threading.Lock()
        self.fired = threading.Event()
        self.fail_times = fail_times
        self.attempts = 0

    def __call__(self, request: RefreshRequest) -> None:
        with self.lock:
            self.attempts += 1
            if self.attempts <= self.fail_times:
                raise ConnectionError("broker down (test)")
            self.requests.append(request)
        self.fired.set()

    def wait(self, count: int = 1, timeout: float = EVENTUALLY) -> list[RefreshRequest]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.005)
        raise AssertionError(f"expected {count} refreshes, got {len(self.requests)}")


def adapter() -> NotificationAdapter:
    return NotificationAdapter(
        ProbeTarget(transport="streamable_http", url="http://127.0.0.1:9/mcp")
    )


@pytest.fixture
def hooks():
    made: list[RefreshHook] = []

    def make(*args, **kwargs) -> RefreshHook:
        hook = RefreshHook(*args, **kwargs)
        made.append(hook)
        return hook

    yield make
    for hook in made:
        hook.close()


def test_a_notification_fires_one_refresh_after_the_quiet_window(hooks):
    source, recorder = adapter(), Recorder()
    hook = hooks(source, 7, debounce_seconds=0.2, enqueue=recorder)
    sent = time.monotonic()
    assert source.dispatch_notification(TOOLS_LIST_CHANGED) == 1
    assert hook.pending
    [request] = recorder.wait(1)
    assert request.fired_at - sent >= 0.2
    assert request.gateway_id == 7 and request.notifications == 1
    assert request.reason == "notification"
    assert (request.include_prompts, request.include_resources) == (False, False)
    assert hook.refresh_count == 1 and not hook.pending
    time.sleep(0.3)
    assert hook.refresh_count == 1  # one notification, one refresh


def test_each_notification_restarts_the_quiet_window(hooks):
    source, recorder = adapter(), Recorder()
    hook = hooks(
        source, 1, debounce_seconds=0.6, max_delay_seconds=60, enqueue=recorder
    )
    for _attempt in range(3):
        # 5 notifications 0.1 s apart: each inside the previous one's window.
        # A sleep overrunning the window (a starved CI box) makes the round
        # inconclusive rather than wrong; it is then tried again.
        sends = []
        for _ in range(5):
            source.dispatch_notification(TOOLS_LIST_CHANGED)
            sends.append(time.monotonic())
            time.sleep(0.1)
        requests = recorder.wait(len(recorder.requests) + 1)
        gaps = [b - a for a, b in zip(sends, sends[1:], strict=False)]
        if max(gaps) < 0.6:
            break
        time.sleep(0.7)
        recorder.requests.clear()
    else:
        pytest.fail("three rounds in a row could not keep 0.1 s gaps under 0.6 s")
    [request] = requests
    assert request.fired_at - sends[-1] >= 0.6, "fired before the last window passed"
    assert request.notifications == 5
    assert hook.pending is False


def test_max_delay_bounds_how_long_a_continuous_storm_postpones_the_refresh(hooks):
    source, recorder = adapter(), Recorder()
    hook = hooks(
        source, 1, debounce_seconds=0.5, max_delay_seconds=1.0, enqueue=recorder
    )
    started = time.monotonic()
    storm_ended = started + 3.0
    while time.monotonic() < storm_ended:  # one every 20 ms: never 0.5 s quiet
        source.dispatch_notification(TOOLS_LIST_CHANGED)
        time.sleep(0.02)
    requests_during_storm = list(recorder.requests)
    # Without the max delay nothing could fire until the storm ended.
    assert requests_during_storm, "the storm postponed the refresh past max_delay"
    first = requests_during_storm[0]
    assert first.fired_at - first.first_at >= 1.0
    assert first.fired_at < storm_ended
    final = recorder.wait(len(requests_during_storm) + 1)
    total = sum(r.notifications for r in final)
    assert total == hook.notification_count  # every notification in some refresh


def test_cancel_drops_the_pending_refresh_and_keeps_listening(hooks):
    source, recorder = adapter(), Recorder()
    hook = hooks(source, 1, debounce_seconds=0.2, enqueue=recorder)
    source.dispatch_notification(TOOLS_LIST_CHANGED)
    assert hook.cancel() is True
    assert hook.cancel() is False  # again: nothing pending, no error
    time.sleep(0.4)
    assert recorder.requests == [] and hook.refresh_count == 0
    assert source.listener_count == 1  # still registered
    source.dispatch_notification(TOOLS_LIST_CHANGED)
    [request] = recorder.wait(1)
    assert request.notifications == 1  # the cancelled one is not carried over


def test_cancel_is_safe_from_many_threads_at_once(hooks):
    source, recorder = adapter(), Recorder()
    hook = hooks(source, 1, debounce_seconds=0.2, enqueue=recorder)
    source.dispatch_notification(TOOLS_LIST_CHANGED)
    barrier = threading.Barrier(16)
    results: list[bool] = []
    errors: list[BaseException] = []

    def cancel() -> None:
        try:
            barrier.wait()
            results.append(hook.cancel())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=cancel) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results.count(True) == 1  # exactly one cancel found it pending
    time.sleep(0.4)
    assert hook.refresh_count == 0


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"debounce_seconds": -0.1}, ValueError),
        ({"max_delay_seconds": -1}, ValueError),
        ({"debounce_seconds": -0.0001, "max_delay_seconds": -5}, ValueError),
        ({"debounce_seconds": math.nan}, ValueError),
        ({"max_delay_seconds": math.inf}, ValueError),
        ({"debounce_seconds": "0.5"}, TypeError),
        ({"max_delay_seconds": True}, TypeError),
    ],
)
def test_invalid_windows_are_refused_and_nothing_is_registered(kwargs, error):
    source = adapter()
    with pytest.raises(error):
        RefreshHook(source, 1, **kwargs)
    assert source.listener_count == 0


def test_zero_windows_are_allowed_and_fire_at_once(hooks):
    source, recorder = adapter(), Recorder()
    hook = hooks(source, 1, debounce_seconds=0, max_delay_seconds=0, enqueue=recorder)
    assert (hook.debounce_seconds, hook.max_delay_seconds) == (0.0, 0.0)
    source.dispatch_notification(TOOLS_LIST_CHANGED)
    recorder.wait(1)


def test_refresh_count_is_exact_under_concurrent_notifications_from_many_threads(
    hooks,
):
    """16 threads x 500 notifications with a zero window: every notification is
    counted into exactly one fired refresh, and refresh_count equals the
    refreshes really enqueued (no lost or double updates)."""
    source, recorder = adapter(), Recorder()
    hook = hooks(source, 1, debounce_seconds=0, max_delay_seconds=0, enqueue=recorder)
    threads_n, per_thread = 16, 500
    barrier = threading.Barrier(threads_n)

    def storm() -> None:
        barrier.wait()
        for i in range(per_thread):
            method = (TOOLS_LIST_CHANGED, PROMPTS_LIST_CHANGED)[i % 2]
            source.dispatch_notification(method)

    threads = [threading.Thread(target=storm) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    deadline = time.monotonic() + EVENTUALLY
    while hook.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    requests = list(recorder.requests)
    assert hook.notification_count == threads_n * per_thread
    assert sum(r.notifications for r in requests) == threads_n * per_thread
    assert hook.refresh_count == len(requests) >= 1


def test_a_storm_from_many_threads_inside_one_window_fires_exactly_once(hooks):
    source, recorder = adapter(), Recorder()
    hook = hooks(
        source, 1, debounce_seconds=0.5, max_delay_seconds=30, enqueue=recorder
    )
    barrier = threading.Barrier(8)

    def storm() -> None:
        barrier.wait()
        for _ in range(125):
            source.dispatch_notification(TOOLS_LIST_CHANGED)

    threads = [threading.Thread(target=storm) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [request] = recorder.wait(1)
    time.sleep(0.7)
    assert hook.refresh_count == 1 and len(recorder.requests) == 1
    assert request.notifications == 1000


def test_prompts_and_resources_notifications_widen_the_refresh(hooks):
    source, recorder = adapter(), Recorder()
    hooks(source, 1, debounce_seconds=0.1, enqueue=recorder)
    source.dispatch_notification(PROMPTS_LIST_CHANGED)
    source.dispatch_notification(TOOLS_LIST_CHANGED)
    [first] = recorder.wait(1)
    assert (first.include_prompts, first.include_resources) == (True, False)
    source.dispatch_notification(RESOURCES_LIST_CHANGED)
    second = recorder.wait(2)[1]
    assert (second.include_prompts, second.include_resources) == (False, True)


def test_other_notifications_are_ignored(hooks):
    source, recorder = adapter(), Recorder()
    hook = hooks(source, 1, debounce_seconds=0, enqueue=recorder)
    source.dispatch_notification("notifications/message", {"level": "info"})
    source.dispatch_notification("notifications/resources/updated", {"uri": "x"})
    time.sleep(0.1)
    assert recorder.requests == [] and hook.notification_count == 0


def test_a_failed_enqueue_is_retried_not_lost(hooks):
    source, recorder = adapter(), Recorder(fail_times=1)
    hook = hooks(source, 1, debounce_seconds=0, enqueue=recorder)
    source.dispatch_notification(TOOLS_LIST_CHANGED)
    [request] = recorder.wait(1)  # the retry (after ~1 s) succeeded
    assert recorder.attempts == 2 and request.notifications == 1
    assert hook.refresh_count == 1  # only enqueued refreshes count


def test_a_request_refresh_folds_into_the_same_window(hooks):
    source, recorder = adapter(), Recorder()
    hook = hooks(source, 1, debounce_seconds=0.2, enqueue=recorder)
    hook.request_refresh(["tools", "resources"], reason="reconnect")
    source.dispatch_notification(TOOLS_LIST_CHANGED)
    [request] = recorder.wait(1)
    assert request.notifications == 1 and request.include_resources
    assert request.reason == "notification"  # a real announcement names it
    hook.request_refresh(reason="reconnect")
    assert recorder.wait(2)[1].reason == "reconnect"


def test_close_unregisters_and_drops_the_pending_refresh():
    source, recorder = adapter(), Recorder()
    hook = RefreshHook(source, 1, debounce_seconds=0.2, enqueue=recorder)
    source.dispatch_notification(TOOLS_LIST_CHANGED)
    hook.close()
    assert source.listener_count == 0
    assert source.dispatch_notification(TOOLS_LIST_CHANGED) == 0
    time.sleep(0.4)
    assert recorder.requests == []
    hook.close()  # idempotent


def test_dispatch_fans_out_to_every_listener_and_survives_a_failing_one():
    source = adapter()
    got: list[tuple[str, str, dict]] = []

    def broken(method: str, params: dict) -> None:
        raise RuntimeError("listener bug")

    def first(method: str, params: dict) -> None:
        params["mutated"] = True  # each listener gets its own copy
        got.append(("first", method, params))

    def second(method: str, params: dict) -> None:
        got.append(("second", method, params))

    for callback in (first, broken, second, first):
        source.add_notification_listener(callback)
    assert source.listener_count == 3  # `first` registered once
    assert source.dispatch_notification(TOOLS_LIST_CHANGED, {"x": 1}) == 3
    assert got == [
        ("first", TOOLS_LIST_CHANGED, {"x": 1, "mutated": True}),
        ("second", TOOLS_LIST_CHANGED, {"x": 1}),
    ]
    assert source.remove_notification_listener(broken) is True
    assert source.remove_notification_listener(broken) is False
    assert source.dispatch_notification(PROMPTS_LIST_CHANGED) == 2


def test_counters_per_gateway_received_coalesced_and_fired(hooks):
    source, recorder = adapter(), Recorder()
    hooks(source, 4242, debounce_seconds=0.2, enqueue=recorder)
    before = scrape()
    for _ in range(3):
        source.dispatch_notification(TOOLS_LIST_CHANGED)
    source.dispatch_notification(PROMPTS_LIST_CHANGED)
    recorder.wait(1)
    time.sleep(0.05)  # the fired counter is written just after the enqueue
    after = scrape()
    gw = {"gateway": "4242"}
    received = "toolsync_listener_notifications_received_total"
    coalesced = "toolsync_listener_notifications_coalesced_total"
    assert delta(before, after, received, kind="tools", **gw) == 3
    assert delta(before, after, received, kind="prompts", **gw) == 1
    assert delta(before, after, coalesced, kind="tools", **gw) == 2
    assert delta(before, after, coalesced, kind="prompts", **gw) == 1
    fired = "toolsync_listener_refreshes_fired_total"
    assert delta(before, after, fired, reason="notification", **gw) == 1
    # The SPEC's per-kind totals move with them.
    assert (
        delta(before, after, "toolsync_notifications_received_total", kind="tools") == 3
    )


def test_the_default_enqueue_sends_the_event_task_to_the_refresh_queue(monkeypatch):
    sent: list[dict] = []
    from refresh.tasks import request_refresh_task

    monkeypatch.setattr(
        request_refresh_task, "apply_async", lambda **kw: sent.append(kw)
    )
    enqueue_event_refresh(
        RefreshRequest(
            gateway_id=5,
            include_prompts=True,
            include_resources=False,
            notifications=3,
            reason="notification",
            first_at=0.0,
            fired_at=0.5,
        )
    )
    assert sent == [
        {
            "kwargs": {
                "gateway_id": 5,
                "trigger": "event",
                "include_prompts": True,
                "include_resources": False,
            }
        }
    ]
    assert metrics.LISTENER_REFRESH_REASONS >= {"notification", "reconnect"}
