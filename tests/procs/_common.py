"""Shared by the race scripts: an App with no handlers (only rows matter there; they
dispatch with `known_type=False`)."""

from cronjobs.app import App, use
from cronjobs.config import Settings


class NoHandlers:
    """A registry with nothing registered: every type gets the default queue."""

    def resolve_handler(self, job_type):
        return None

    def registered_handlers(self):
        return {}


def bare_app(url: str) -> App:
    """An App on `url` with no handlers, installed as the current App."""
    app = App(Settings(database_url=url), handlers=NoHandlers())
    use(app)
    return app
