"""The collector pause around a refresh: counted, restored, never left off."""

from __future__ import annotations

import gc
import threading

import pytest

from refresh.collector import collector_paused


@pytest.fixture(autouse=True)
def _collector_on():
    gc.enable()
    yield
    gc.enable()


def test_pause_turns_the_collector_off_and_back_on():
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_nested_and_failing_blocks_restore_it_once_the_last_leaves():
    with pytest.raises(RuntimeError), collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()  # the outer block still runs
        raise RuntimeError("a refresh crashed")
    assert gc.isenabled()


def test_threads_keep_it_off_until_the_last_one_leaves():
    inside = threading.Barrier(4)
    leave = [threading.Event() for _ in range(3)]
    left = [threading.Event() for _ in range(3)]

    def refresh(number: int) -> None:
        with collector_paused():
            inside.wait()
            leave[number].wait()
        left[number].set()

    threads = [threading.Thread(target=refresh, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    inside.wait()
    for number in range(2):
        leave[number].set()
        left[number].wait()
        assert not gc.isenabled()  # one refresh is still inside
    leave[2].set()
    for thread in threads:
        thread.join()
    assert gc.isenabled()


@pytest.mark.django_db
def test_a_refresh_runs_paused_and_leaves_the_collector_as_it_found_it(
    gateway, fake_probe, monkeypatch
):
    from refresh import services
    from refresh.models import RefreshRun

    fake_probe.set_tools([{"name": "a", "inputSchema": {"type": "object"}}])
    seen = []
    real = services.probe_catalog

    def spy(result):
        seen.append(gc.isenabled())
        return real(result)

    monkeypatch.setattr(services, "probe_catalog", spy)
    run = services.refresh_gateway(gateway=gateway, trigger=RefreshRun.Trigger.CLI)
    assert run.status == "succeeded"
    assert seen == [False]
    assert gc.isenabled()
