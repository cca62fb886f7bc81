"""Prometheus metrics (SPEC 7): names, labels, the /metrics view, and dead-process files."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from refresh import metrics
from tests.factories import GatewayFactory, RefreshRunFactory

ROOT = Path(__file__).resolve().parents[2]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by name and sorted labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def scrape() -> dict:
    body, _ = metrics.render_latest()
    return samples(body.decode())


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


@pytest.mark.django_db
def test_each_run_outcome_lands_in_the_spec_metrics(gateway):
    before = scrape()
    runs = [
        RefreshRunFactory(
            gateway=gateway,
            trigger="schedule",
            status="succeeded",
            applied=True,
            complete=True,
            duration_ms=1200,
            summary={"added": 2, "updated": 1, "unchanged": 7, "deactivated": 1},
        ),
        RefreshRunFactory(
            gateway=gateway,
            trigger="api",
            status="succeeded",
            complete=True,
            duration_ms=40,
            summary={"added": 9},
        ),
        RefreshRunFactory(
            gateway=gateway,
            trigger="event",
            status="succeeded",
            complete=False,
            duration_ms=300,
        ),
        RefreshRunFactory(
            gateway=gateway,
            trigger="schedule",
            status="failed",
            error_code="connect_failed",
            duration_ms=15,
        ),
        RefreshRunFactory(
            gateway=gateway,
            trigger="schedule",
            status="skipped",
            error_code="gateway_unreachable",
        ),
    ]
    for run in runs:
        metrics.run_finished(run)
    after = scrape()
    count = "toolsync_refresh_duration_seconds_count"
    assert delta(before, after, count, trigger="schedule", outcome="applied") == 1
    assert delta(before, after, count, trigger="api", outcome="dry_run") == 1
    assert delta(before, after, count, trigger="event", outcome="incomplete") == 1
    assert delta(before, after, count, trigger="schedule", outcome="failed") == 1
    assert delta(before, after, count, trigger="schedule", outcome="skipped") == 1
    total = "toolsync_refresh_duration_seconds_sum"
    assert delta(
        before, after, total, trigger="schedule", outcome="applied"
    ) == pytest.approx(1.2)
    bucket = "toolsync_refresh_duration_seconds_bucket"
    assert (
        delta(before, after, bucket, trigger="schedule", outcome="applied", le="1.0")
        == 0
    )
    assert (
        delta(before, after, bucket, trigger="schedule", outcome="applied", le="2.5")
        == 1
    )
    # Changes are what applied runs wrote: the dry run's 9 "added" are not.
    changes = "toolsync_refresh_changes_total"
    assert delta(before, after, changes, change="added") == 2
    assert delta(before, after, changes, change="updated") == 1
    assert delta(before, after, changes, change="deactivated") == 1
    assert (changes, (("change", "unchanged"),)) not in after
    failures = "toolsync_refresh_failures_total"
    assert delta(before, after, failures, reason="connect_failed") == 1


def test_notification_counters_keep_label_values_bounded():
    before = scrape_without_db()
    metrics.notification_received("tools", 1)
    metrics.notification_received("prompts", 1)
    metrics.notification_received("../../etc/passwd\n", 1)
    metrics.notification_coalesced("tools", 1)
    after = scrape_without_db()
    received = "toolsync_notifications_received_total"
    assert delta(before, after, received, kind="tools") == 1
    assert delta(before, after, received, kind="prompts") == 1
    assert delta(before, after, received, kind="other") == 1
    assert (
        delta(before, after, "toolsync_notifications_coalesced_total", kind="tools")
        == 1
    )


def scrape_without_db() -> dict:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=metrics.multiprocess_dir())
    return samples(generate_latest(registry).decode())


@pytest.mark.django_db
def test_metrics_view_serves_the_text_format_with_the_database_gauges(client):
    up = GatewayFactory(health="healthy")
    down = GatewayFactory(health="unreachable")
    unknown = GatewayFactory()
    disabled = GatewayFactory(enabled=False, health="healthy")
    GatewayFactory(
        lease_token="0b5f6f2e-3a0e-4a59-9d4a-1f4f3c1b2a10",
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    GatewayFactory(  # an expired lease is a dead worker, not a refresh in progress
        lease_token="1b5f6f2e-3a0e-4a59-9d4a-1f4f3c1b2a10",
        lease_expires_at=timezone.now() - timedelta(minutes=5),
    )
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    assert (
        "no-cache" in response["Cache-Control"]
        or "max-age=0" in response["Cache-Control"]
    )
    got = samples(response.content.decode())
    assert got[("toolsync_gateway_up", (("gateway", str(up.pk)),))] == 1.0
    assert got[("toolsync_gateway_up", (("gateway", str(down.pk)),))] == 0.0
    assert got[("toolsync_gateway_up", (("gateway", str(unknown.pk)),))] == 0.0
    assert ("toolsync_gateway_up", (("gateway", str(disabled.pk)),)) not in got
    assert got[("toolsync_refreshes_in_progress", ())] == 1.0


@pytest.mark.django_db
def test_metrics_view_answers_get_only(client):
    assert client.post("/metrics").status_code == 405


def _child(directory: Path, code: str) -> int:
    """Run `code` in a fresh interpreter writing samples to `directory`; return its pid."""
    script = (
        textwrap.dedent(
            """
        import os
        from refresh import metrics
        """
        )
        + textwrap.dedent(code)
        + "\nprint(os.getpid())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[-1])


def _sum(directory: Path) -> dict:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    return samples(generate_latest(registry).decode())


def test_dead_processes_are_folded_into_archives_without_losing_counts(tmp_path):
    work = """
        metrics.REFRESH_FAILURES.labels(reason="timeout").inc(3)
        metrics.REFRESH_DURATION.labels(trigger="schedule", outcome="applied").observe(0.7)
        metrics.REFRESH_DURATION.labels(trigger="schedule", outcome="applied").observe(42)
        metrics.notification_received("tools")
    """
    pids = [_child(tmp_path, work), _child(tmp_path, work)]
    summed = _sum(tmp_path)
    failures = ("toolsync_refresh_failures_total", (("reason", "timeout"),))
    count = (
        "toolsync_refresh_duration_seconds_count",
        (("outcome", "applied"), ("trigger", "schedule")),
    )
    assert summed[failures] == 6 and summed[count] == 4

    assert sorted(metrics.compact_dead_processes(str(tmp_path))) == sorted(pids)
    files = sorted(p.name for p in tmp_path.glob("*.db"))
    assert files == ["counter_archive.db", "histogram_archive.db"]
    assert _sum(tmp_path) == summed  # nothing lost, nothing counted twice

    # A later process adds to the archived totals; compacting again keeps them.
    _child(tmp_path, work)
    metrics.compact_dead_processes(str(tmp_path))
    again = _sum(tmp_path)
    assert again[failures] == 9 and again[count] == 6
    bucket = (
        "toolsync_refresh_duration_seconds_bucket",
        (("le", "60.0"), ("outcome", "applied"), ("trigger", "schedule")),
    )
    assert again[bucket] == 6
    assert metrics.compact_dead_processes(str(tmp_path)) == []


def test_files_of_live_processes_are_left_alone(tmp_path):
    live = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom refresh import metrics\n"
            "metrics.notification_received('tools')\nprint('ready', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        cwd=ROOT,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert live.stdout.readline().strip() == "ready"
        assert metrics.compact_dead_processes(str(tmp_path)) == []
        assert (tmp_path / f"counter_{live.pid}.db").exists()
    finally:
        live.stdin.close()
        live.wait(timeout=10)


def test_wiping_at_start_keeps_live_processes_files(tmp_path):
    dead = _child(tmp_path, "metrics.notification_received('tools')")
    (tmp_path / "counter_archive.db").write_bytes(b"")
    mine = tmp_path / f"counter_{os.getpid()}.db"
    mine.write_bytes(b"")
    metrics.wipe_multiprocess_dir(str(tmp_path))
    assert not (tmp_path / f"counter_{dead}.db").exists()
    assert not (tmp_path / "counter_archive.db").exists()
    assert mine.exists()
