"""`cronjobs tokens`: API tokens with a scope (docs/api.md): create (the token shown
once, alone on the last line), list (never the token), revoke."""

from __future__ import annotations

import click

from .base import Group, _app, _dump, _table, main

SCOPES = ("read", "dispatch", "operate", "admin")  # as store.tokens.SCOPES (lazy: start-up)


@main.group(cls=Group)
def tokens() -> None:
    """API tokens for the dashboard's JSON routes (`Authorization: Bearer TOKEN`), each
    with a scope: read < dispatch < operate < admin (each includes the ones before it).
    Only a hash of a token is stored. CRONJOBS_DASHBOARD_TOKEN stays an admin token."""


@tokens.command("create")
@click.argument("name")
@click.option("--scope", required=True, metavar="|".join(SCOPES),
              help="What the token may do: read (GET routes), dispatch (add rows of types "
                   "whose DISPATCH_SCOPE allows it, ping external tasks), operate (retry, "
                   "cancel, stop, run now, pause, resume, unblock, task switches, bulk "
                   "operations including delete), admin (everything: schedules, built-in "
                   "types over HTTP).")
def tokens_create(name: str, scope: str) -> None:
    """Make token NAME with --scope; the token is printed once, alone on the last line
    (store it now: it cannot be shown again). A revoked token of that name is replaced.
    Bad name or scope, or a name taken (not revoked): one line, exit 2, nothing written."""
    from ..store import tokens as stored  # lazy: CLI start-up time

    stored.check_name(name)
    stored.check_scope(scope)
    app = _app()
    with app.engine.begin() as conn:
        token = stored.create(conn, name, scope, app.clock.now())
    click.echo(f"created token {name!r} with scope {scope}; it is shown once, on the next "
               f"line:")
    click.echo(token)


@tokens.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def tokens_list(as_json: bool = False) -> None:
    """Every token: NAME, SCOPE, CREATED, LAST_USED (at most a minute late), REVOKED (UTC);
    never the token itself."""
    from ..store import tokens as stored  # lazy: CLI start-up time

    app = _app()
    with app.engine.connect() as conn:
        found = stored.list_tokens(conn)
    if as_json:
        click.echo(_dump(found))
        return
    if not found:
        click.echo("no tokens (make one: cronjobs tokens create NAME --scope read)")
        return
    when = lambda v: f"{v:%Y-%m-%d %H:%M}" if v else ""  # noqa: E731
    rows = [{"name": r["name"], "scope": r["scope"], "created": when(r["created_at"]),
             "last_used": when(r["last_used_at"]), "revoked": when(r["revoked_at"])}
            for r in found]
    _table(rows, list(rows[0]))


@tokens.command("revoke")
@click.argument("name")
def tokens_revoke(name: str) -> None:
    """Revoke token NAME: requests with it answer 401 from now on. Its row stays, listed
    as revoked, until `tokens create NAME` makes a new token of that name, which
    replaces the row (the old token stays refused). An unknown or already revoked name:
    one line, exit 2."""
    from ..store import tokens as stored  # lazy: CLI start-up time

    app = _app()
    with app.engine.begin() as conn:
        stored.revoke(conn, name, app.clock.now())
    click.echo(f"revoked token {name!r}")
