"""The token scope a dashboard route needs (docs/api.md).

A view declares it with `@requires(scope)` (below its route decorator); a view without
one needs `read` for GET and HEAD and `admin` for any other method (`needed`). Scopes,
each including the ones before it: `read` < `dispatch` < `operate` < `admin`. The check
itself is `auth.require_login`'s.
"""

from __future__ import annotations

from ..store.tokens import SCOPES, scope_allows

__all__ = ["SCOPES", "needed", "requires", "scope_allows"]

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def requires(scope: str):
    """Mark a view as needing `scope` (one of `SCOPES`).

    Raises:
        ValueError: an unknown scope (at import time, so a typo never ships).

    Returns:
        A decorator that sets `view.cronjobs_scope` and returns the view.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")

    def mark(view):
        view.cronjobs_scope = scope
        return view
    return mark


def needed(view, method: str) -> str:
    """The scope a request with HTTP `method` to `view` (a view function, or None for an
    unknown route) needs: `read` for OPTIONS, else the view's `cronjobs_scope`, else `read`
    for GET and HEAD and `admin` for the other methods."""
    scope = getattr(view, "cronjobs_scope", None)
    if method == "OPTIONS":  # Flask answers it alone: it runs no view
        return "read"
    if scope:
        return scope
    return "read" if method in SAFE_METHODS else "admin"
