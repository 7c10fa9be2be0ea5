"""`GET /api/openapi.json` (issue 40 §1): an OpenAPI 3.1 document in which every `/api/`
route of the dashboard (every method) is documented and every documented path and
method exists, each with the scope its view needs; docs/api.md is generated from it."""

from __future__ import annotations

import re

import pytest

from cronjobs.store import tokens
from cronjobs.web import create_app
from cronjobs.web.openapi import openapi_path, operation
from cronjobs.web.scopes import needed
from dashboard_helpers import TOKEN

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
IGNORED = {"HEAD", "OPTIONS"}


@SQLITE
def test_the_document_matches_the_routes(make_app):
    app = make_app(dashboard_token=TOKEN)
    web = create_app(app)
    with app.engine.begin() as conn:
        token = tokens.create(conn, "reader", "read", app.clock.now())
    resp = web.test_client().get("/api/openapi.json",
                                 headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200
    doc = resp.get_json()
    assert doc["openapi"].startswith("3.1.")
    routes = {(openapi_path(rule.rule), method.lower()): web.view_functions[rule.endpoint]
              for rule in web.url_map.iter_rules() if rule.rule.startswith("/api/")
              for method in (rule.methods or set()) - IGNORED}
    documented = {(path, method) for path, methods in doc["paths"].items()
                  for method in methods}
    assert sorted(set(routes) - documented) == []  # every route documented
    assert sorted(documented - set(routes)) == []  # every documented route exists
    assert len(routes) >= 24
    for (path, method), view in routes.items():
        op = doc["paths"][path][method]
        assert op["x-cronjobs-scope"] == needed(view, method.upper()), (path, method)
        assert op["summary"] and {"401", "403"} <= set(op["responses"])
        names = sorted(p["name"] for p in op["parameters"] if p["in"] == "path")
        assert names == sorted(re.findall(r"{([^}]+)}", path)), (path, method)
    assert doc["paths"]["/api/jobs/{job_id}/retry"]["post"]["x-cronjobs-scope"] == "operate"
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    # what each route really answers: a body route's 413 and 415, no 400 for a bodiless one
    answers = {path: set(doc["paths"][path]["post"]["responses"]) for path in (
        "/api/jobs/{job_id}/cancel", "/api/tasks/{task}/run", "/api/pauses",
        "/api/pauses/resume", "/api/blocks/unblock", "/api/schedules")}
    assert "400" not in answers.pop("/api/jobs/{job_id}/cancel")
    assert "409" in answers.pop("/api/schedules")
    assert all({"400", "413", "415"} <= codes for codes in answers.values()), answers
    assert doc["servers"] == [{"url": "/"}]  # served alone: paths from the root


def test_operation_refuses_a_type_that_is_not_json():
    with pytest.raises(ValueError, match="not a JSON type: 'str'"):
        operation("x", {"200": "ok"}, body={"a": "str"})
