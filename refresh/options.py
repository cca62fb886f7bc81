"""Refresh options: what a caller asked a refresh to do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from refresh.diff import DiffOptions


@dataclass(frozen=True)
class RefreshOptions:
    """Flags of SPEC 3.4 / 6. `apply=False` (a dry run) is the default everywhere.

    `expected_fingerprint` makes an apply conditional on the server still
    offering exactly the catalog a preview showed (admin Apply). A probe
    credential is never part of the options: it is never stored.
    """

    apply: bool = False
    apply_effect: bool = False
    deactivate_missing: bool = False
    reactivate_returning: bool = False
    include_prompts: bool = False
    include_resources: bool = False
    expected_fingerprint: str | None = None

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        if data["expected_fingerprint"] is None:
            del data["expected_fingerprint"]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RefreshOptions:
        data = data or {}
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def diff_options(self) -> DiffOptions:
        return DiffOptions(
            apply_effect=self.apply_effect,
            deactivate_missing=self.deactivate_missing,
            reactivate_returning=self.reactivate_returning,
        )
