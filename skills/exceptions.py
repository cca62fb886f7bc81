"""Errors of the skills app; each carries a stable code and an HTTP status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SKILL_NOT_FOUND = "SKILL_NOT_FOUND"


class SkillError(Exception):
    """Base: `code` is the API error code, `status` the HTTP status."""

    code = "skill_error"
    status = 422

    def __init__(
        self, message: str, *, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = dict(details or {})


class SkillNotFound(SkillError):
    """No skill of that name is registered in the tenant."""

    code = SKILL_NOT_FOUND
    status = 404

    def __init__(self, name: str) -> None:
        super().__init__(f"no skill named {name!r}", details={"name": name})
        self.name = name


class SkillInvalid(SkillError):
    """A skill's name or content breaks the rules; `details` maps field paths to messages."""

    code = "validation_error"
    status = 422
