"""Message lookup that works inside a dashboard request (Flask-Babel) and outside one.

Handlers use `gettext` for the labels of their Results tab: in the dashboard it returns
the label from the message catalog of the request's language; anywhere else (tests, the
CLI) it returns the text unchanged. A text missing from the catalog is shown as it is.
"""

from __future__ import annotations


def gettext(text: str, **variables) -> str:  # noqa: ANN003
    """Translate `text` (with `%(name)s` variables) in the current request's language."""
    try:
        from flask import has_request_context

        if has_request_context():
            from flask_babel import gettext as babel_gettext

            return babel_gettext(text, **variables)
    except ImportError:  # pragma: no cover - Flask-Babel is a dependency
        pass
    return text % variables if variables else text
