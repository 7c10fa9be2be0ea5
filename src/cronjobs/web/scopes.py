"""The token scope a dashboard route needs (docs/api.md).

A view declares it with `@requires(scope)` (below its route decorator); a view without
one needs `read` for GET and HEAD and `admin` for any other method (`needed`). Scopes,
each including the ones before it: `read` < `dispatch` < `operate` < `admin`. The check
itself is `auth.require_login`'s.
"""

from __future__ import annotations

from flask import g, request

from ..store.tokens import SCOPES, scope_allows

__all__ = ["SCOPES", "needed", "requires", "ping_refusal", "scope_allows", "type_refusal",
           "type_scope"]

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


def type_scope(app, job_type: object) -> str:
    """The token scope that starting a row of `job_type` over HTTP (`POST /api/jobs`,
    `:batch`) needs: its handler's `DISPATCH_SCOPE` (`admin` for the built-in handlers),
    `dispatch` for a type without a handler here (a remote type; an unknown type is
    refused later, 422). `app` is the `cronjobs.app.App` whose handlers decide."""
    cls = app.resolve(job_type) if isinstance(job_type, str) else None
    scope = getattr(cls, "DISPATCH_SCOPE", "dispatch")
    return scope if scope in SCOPES else "admin"  # a bad value: the registry refuses it


def type_refusal(app, job_type: object) -> str | None:
    """The one-line 403 message when this request's token (`g.token_scope`) lacks the
    scope a row of `job_type` needs (`type_scope`), naming the type, the scope it needs
    and the token's; None when the token may start it."""
    have, need = g.get("token_scope") or "admin", type_scope(app, job_type)
    if scope_allows(have, need):
        return None
    return (f"forbidden: {request.method} {request.path} of type {job_type!r:.120} needs "
            f"scope {need} (its DISPATCH_SCOPE); token {g.get('token_name')!r} has {have}")


def ping_refusal(app, task: str) -> str | None:
    """The one-line 403 message when this request's token lacks `operate` and `task` is
    a registered task (its handler runs here: a ping `start` would hold its schedule, a
    `fail` write a failed run and alert); None for an external task (`[tasks.<task>]`
    with a frequency, `dispatch` is enough), an unknown one (404 later) or an `operate`
    token. `app` is the `cronjobs.app.App` whose handlers decide."""
    have = g.get("token_scope") or "admin"
    if scope_allows(have, "operate") or task not in app.handlers.tasks():
        return None
    return (f"forbidden: {request.method} {request.path}: task {task!r:.120} runs here (a "
            f"registered handler); pinging it needs scope operate; token "
            f"{g.get('token_name')!r} has {have}")
