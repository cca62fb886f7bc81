"""Filter sets for list endpoints: unknown values are a 422, never silently ignored."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db import models

BOOLEAN_CHOICES = (("true", "true"), ("false", "false"))


def _to_bool(value: str) -> bool:
    return value == "true"


class StrictBooleanFilter(django_filters.TypedChoiceFilter):
    """`?active=true|false`; django-filter's default reads `?active=perhaps` as no filter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("choices", BOOLEAN_CHOICES)
        kwargs.setdefault("coerce", _to_bool)
        super().__init__(*args, **kwargs)


class StrictFilterSet(django_filters.FilterSet):
    """A FilterSet whose boolean fields refuse values other than true / false."""

    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        models.BooleanField: {"filter_class": StrictBooleanFilter},
    }
