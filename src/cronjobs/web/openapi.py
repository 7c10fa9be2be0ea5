"""The OpenAPI 3.1 document of the dashboard's JSON routes, `GET /api/openapi.json`
(scope `read`), and the page docs/api.md generated from it (scripts/gen_reference.py).

Each blueprint module with routes under `/api/` defines a module-level `OPENAPI: dict` =
`{"/api/path/{param}": {"post": operation object}}` (path parameters in `{}` form),
usually written with `operation`. `document(web)` collects them from the module of every
blueprint registered on `web`, adds the path parameters and each operation's scope
(`x-cronjobs-scope`, read from the view itself: `scopes.needed`), and nothing else:
tests/test_openapi.py checks that every `/api/` route is documented and every documented
one exists.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import PackageNotFoundError, version

from flask import Blueprint, Flask, current_app, jsonify, request

from .scopes import needed

bp = Blueprint("openapi", __name__)
OPENAPI_VERSION = "3.1.0"
_PARAM = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")
_METHODS = ("get", "post", "put", "patch", "delete")
AUTH_ANSWERS = {"401": {"description": "no token, a wrong or a revoked one"},
                "403": {"description": "the token's scope is too small"}}
TYPES = {"string", "integer", "number", "boolean", "object", "array"}


def operation(summary: str, responses: dict[str, str], *, body: dict[str, str] | None = None,
              query: dict[str, str] | None = None, description: str = "") -> dict:
    """An OpenAPI operation object.

    Args:
        summary: one line.
        responses: `{status code: description}`; 401 and 403 are added.
        body: a JSON object body's fields, `{name: JSON type}` (`string`, `integer`,
            `object`, ...); None: no body.
        query: query parameters, `{name: JSON type}`.
        description: more text (Markdown).

    Returns:
        The operation (a dict, ready for the document).

    Raises:
        ValueError: a type that is not a JSON type.
    """
    for kind in [*(body or {}).values(), *(query or {}).values()]:
        if kind not in TYPES:
            raise ValueError(f"not a JSON type: {kind!r}")
    found = {"summary": summary, "responses": {
        code: {"description": text} for code, text in {
            **responses, "401": "no token, a wrong or a revoked one",
            "403": "the token's scope is too small"}.items()}}
    if description:
        found["description"] = description
    if query:
        found["parameters"] = [{"name": name, "in": "query", "required": False,
                                "schema": {"type": kind}} for name, kind in query.items()]
    if body is not None:
        schema = {"type": "object", "additionalProperties": False,
                  "properties": {name: {"type": kind} for name, kind in body.items()}}
        found["requestBody"] = {"required": False, "content": {
            "application/json": {"schema": schema}}}
    return found


def openapi_path(rule: str) -> str:
    """A Werkzeug rule (`/api/jobs/<id:job_id>`) as an OpenAPI path (`/api/jobs/{job_id}`)."""
    return _PARAM.sub(r"{\1}", rule)


def _version() -> str:
    try:
        return version("cronjobs")
    except PackageNotFoundError:  # run from a source tree
        return "0"


def document(web: Flask) -> dict:
    """The OpenAPI 3.1 document of dashboard `web`: the `OPENAPI` of every registered
    blueprint's module, each operation with its path parameters (those it does not declare),
    its 401 and 403 answers and `x-cronjobs-scope`.

    Returns:
        The document (a dict, JSON-ready).
    """
    paths: dict[str, dict] = {}
    for blueprint in web.blueprints.values():
        module = sys.modules[blueprint.import_name]
        for path, methods in getattr(module, "OPENAPI", {}).items():
            paths.setdefault(path, {}).update(methods)
    views = {}
    for rule in web.url_map.iter_rules():
        for method in rule.methods or ():
            views[(openapi_path(rule.rule), method.lower())] = web.view_functions[rule.endpoint]
    for path, methods in paths.items():
        names = re.findall(r"{([^}]+)}", path)
        for method, op in methods.items():
            op = methods[method] = dict(op)
            if (path, method) in views:
                op["x-cronjobs-scope"] = needed(views[path, method], method.upper())
            given = {p["name"] for p in op.get("parameters", []) if p.get("in") == "path"}
            op["parameters"] = [
                {"name": n, "in": "path", "required": True,
                 "schema": {"type": "integer" if n.endswith("id") else "string"}}
                for n in names if n not in given] + op.get("parameters", [])
            op["responses"] = {**AUTH_ANSWERS, **op.get("responses", {})}
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "cronjobs dashboard API", "version": _version(),
                 "description": "JSON routes of the cronjobs dashboard; every request "
                                "needs a Bearer token whose scope is at least the "
                                "operation's `x-cronjobs-scope` (read < dispatch < "
                                "operate < admin)."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": dict(sorted(paths.items())),
    }


@bp.get("/api/openapi.json")
def openapi_json():
    """This dashboard's OpenAPI 3.1 document (`document`), with `servers` naming the
    mount's path (`request.script_root`, `/` when served alone) so that its paths
    resolve under the prefix (`/jobs` + `/api/jobs`)."""
    return jsonify({**document(current_app), "servers": [{"url": request.script_root or "/"}]})


OPENAPI: dict = {
    "/api/openapi.json": {"get": operation("This document", {"200": "OpenAPI 3.1 (JSON)"})},
}
