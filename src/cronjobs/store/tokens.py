"""API tokens (`cronjob_token`, docs/api.md): a named token with a scope, stored as the
SHA-256 of the token. The token itself is made here (`new_token`), shown once by
`cronjobs tokens create` and never stored; a request's Bearer token is looked up by its
hash (`find`).

Scopes, each including the ones before it: `read` < `dispatch` < `operate` < `admin`.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime

from sqlalchemy import Connection, select, update

from ..errors import TokenError
from .models import cronjob_token
from .sql import insert_ignore

SCOPES = ("read", "dispatch", "operate", "admin")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}")
DASHBOARD = "dashboard"  # the name of the dashboard's own token (CRONJOBS_DASHBOARD_TOKEN)
COLUMNS = ("name", "scope", "created_at", "last_used_at", "revoked_at")


def scope_allows(have: str, need: str) -> bool:
    """True when scope `have` includes scope `need` (`admin` includes every other)."""
    return SCOPES.index(have) >= SCOPES.index(need)


def check_scope(scope: str) -> str:
    """`scope` if it is one of `SCOPES`.

    Raises:
        TokenError: any other value (the message names it and the scopes).
    """
    if scope not in SCOPES:
        raise TokenError(f"scope must be one of {', '.join(SCOPES)}, got {scope[:40]!r}")
    return scope


def check_name(name: str) -> str:
    """`name` if it is a token name: 1 to 64 characters, ASCII letters, digits and `. _ @ : -`,
    starting with a letter or digit; not `dashboard` (the dashboard's own token).

    Raises:
        TokenError: any other name (the message names it).
    """
    if not NAME.fullmatch(name):
        raise TokenError(f"token name must be 1 to 64 characters, each an ASCII letter (A-Z, "
                         f"a-z), a digit (0-9) or one of . _ @ : - (the first a letter or "
                         f"digit), got {name[:70]!r}")
    if name == DASHBOARD:
        raise TokenError("token name 'dashboard' is reserved for CRONJOBS_DASHBOARD_TOKEN")
    return name


def new_token() -> str:
    """A new random token: 32 random bytes, URL-safe text (43 characters)."""
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """The stored form of `token`: its SHA-256, 64 hex digits."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def create(conn: Connection, name: str, scope: str, now: datetime) -> str:
    """Store a new token `name` with `scope` made at `now` (naive UTC); a revoked token of
    that name is replaced (a new hash: its old token stays refused).

    Returns:
        The token (shown once: only its hash is stored).

    Raises:
        TokenError: a bad name or scope, or an unrevoked token of that name exists.
    """
    check_name(name)
    check_scope(scope)
    token = new_token()
    done = conn.execute(insert_ignore(conn, cronjob_token, ["name"]).values(
        name=name, scope=scope, hash=token_hash(token), created_at=now
    ).execution_options(preserve_rowcount=True))  # psycopg 3 drops it (-1) otherwise
    if done.rowcount == 1:
        return token
    reused = conn.execute(update(cronjob_token).where(  # a revoked name is free again
        cronjob_token.c.name == name, cronjob_token.c.revoked_at.is_not(None)).values(
        scope=scope, hash=token_hash(token), created_at=now, last_used_at=None,
        revoked_at=None))
    if reused.rowcount != 1:
        raise TokenError(f"a token named {name!r} exists already (revoke it first, or pick "
                         f"another name)")
    return token


def list_tokens(conn: Connection) -> list[dict]:
    """Every token, by name: `{name, scope, created_at, last_used_at, revoked_at}` (never
    the token or its hash)."""
    cols = [cronjob_token.c[c] for c in COLUMNS]
    return [dict(r) for r in conn.execute(select(*cols).order_by(cronjob_token.c.name))
            .mappings()]


def revoke(conn: Connection, name: str, now: datetime) -> None:
    """Revoke token `name` at `now` (naive UTC): requests with it answer 401 from then on.

    Raises:
        TokenError: no token of that name, it is revoked already, or it is `dashboard`
            (CRONJOBS_DASHBOARD_TOKEN: a setting).
    """
    if name == DASHBOARD:
        raise TokenError("the dashboard token is CRONJOBS_DASHBOARD_TOKEN and cannot be "
                         "revoked here; change that setting (and restart the dashboard)")
    done = conn.execute(update(cronjob_token).where(
        cronjob_token.c.name == name, cronjob_token.c.revoked_at.is_(None)).values(
        revoked_at=now))
    if done.rowcount == 1:
        return
    found = conn.execute(select(cronjob_token.c.revoked_at).where(
        cronjob_token.c.name == name)).first()
    if found is None:
        raise TokenError(f"no token named {name[:70]!r} (see `cronjobs tokens list`)")
    raise TokenError(f"token {name!r} is revoked already")


def find(conn: Connection, token: str) -> dict | None:
    """The valid (unrevoked) token whose hash is that of `token`: `{name, scope,
    last_used_at}`, or None. One read by a unique index."""
    stmt = select(cronjob_token.c.name, cronjob_token.c.scope,
                  cronjob_token.c.last_used_at).where(
        cronjob_token.c.hash == token_hash(token), cronjob_token.c.revoked_at.is_(None))
    found = conn.execute(stmt).mappings().first()
    return dict(found) if found else None


def touch(conn: Connection, name: str, now: datetime) -> None:
    """Set token `name`'s `last_used_at` to `now` (naive UTC)."""
    conn.execute(update(cronjob_token).where(cronjob_token.c.name == name).values(
        last_used_at=now))
