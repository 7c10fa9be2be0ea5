"""The token scope a dashboard route needs (placeholder; part A1 owns this module)."""

from __future__ import annotations

SCOPES = ("read", "dispatch", "operate", "admin")


def requires(scope: str):
    """Mark a view as needing `scope`."""
    def mark(view):
        view.cronjobs_scope = scope
        return view
    return mark
