"""The Celery configuration as Celery itself reads it back (misspelled CELERY_* are silently ignored)."""

from __future__ import annotations

from celery.app.defaults import DEFAULTS
from django.conf import settings

from project.celery import app
from refresh import tasks  # noqa: F401 - registers the tasks, as a worker's autodiscovery does


def test_every_celery_setting_in_django_settings_is_a_real_celery_setting():
    names = [n for n in dir(settings) if n.startswith("CELERY_")]
    assert names, "no CELERY_* settings found"
    known = {key.lower() for key in DEFAULTS}
    unknown = [n for n in names if n.removeprefix("CELERY_").lower() not in known]
    assert unknown == []


def test_serialisation_is_json_only():
    assert app.conf.task_serializer == "json"
    assert app.conf.result_serializer == "json"
    assert app.conf.accept_content == ["json"]


def test_time_limits_bound_the_probe_deadline():
    soft, hard = app.conf.task_soft_time_limit, app.conf.task_time_limit
    assert soft > settings.TOOLSYNC_PROBE_DEADLINE
    assert hard > soft
    health = app.tasks["refresh.check_health"]
    assert health.soft_time_limit > settings.TOOLSYNC_HEALTH_CHECK_TIMEOUT
    assert health.time_limit > health.soft_time_limit


def test_delivery_settings_suit_long_idempotent_tasks():
    assert app.conf.task_acks_late is True
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.task_ignore_result is True
    assert app.conf.beat_scheduler == "django_celery_beat.schedulers:DatabaseScheduler"


def test_tasks_have_explicit_names_and_routes():
    names = {
        "refresh.execute_run": "refresh",
        "refresh.request_refresh": "refresh",
        "refresh.check_health": "health",
        "refresh.sweep_due_gateways": "schedule",
        "refresh.sweep_health_checks": "schedule",
    }
    for name, queue in names.items():
        assert name in app.tasks, name
        assert app.amqp.router.route({}, name)["queue"].name == queue
    assert {q.name for q in app.conf.task_queues} == {"refresh", "health", "schedule"}
    assert app.conf.task_default_queue == "refresh"


def test_beat_sends_both_sweeps_and_they_expire():
    schedule = app.conf.beat_schedule
    sweep = schedule["refresh.sweep_due_gateways"]
    assert sweep["task"] == "refresh.sweep_due_gateways"
    assert sweep["schedule"] == float(settings.TOOLSYNC_SCHEDULE_SWEEP_SECONDS)
    assert sweep["options"]["queue"] == "schedule"
    assert 0 < sweep["options"]["expires"]
    health = schedule["refresh.sweep_health_checks"]
    assert health["task"] == "refresh.sweep_health_checks"
    assert health["schedule"] <= settings.TOOLSYNC_HEALTH_CHECK_INTERVAL
