"""Every App has a handler registry of its own, built from its settings: two Apps of one
process never see each other's folders or registrations, nothing global is reset, and a
class registered by code on the default registry reaches every App while it stays
registered."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import registry
from cronjobs import CronJobHandler
from cronjobs.app import App, use
from cronjobs.config import Settings
from cronjobs.errors import DuplicateHandlerType
from cronjobs.testing import make_test_app

HANDLER = '''
from cronjobs import CronJobHandler


class {name}(CronJobHandler):
    TYPE = "{type}"

    def handle(self, payload, job):
        return {{"success": True, "result": {{"from": "{name}"}}}}
'''


def folder_with(path: Path, **classes: str) -> Path:
    """A handler folder with one file per `ClassName=type`."""
    path.mkdir(parents=True)
    for name, job_type in classes.items():
        (path / f"{name}.py").write_text(textwrap.dedent(HANDLER.format(name=name, type=job_type)))
    return path


def app_of(tmp_path: Path, *folders: Path, name: str = "a") -> App:
    return App(Settings(database_url=f"sqlite:///{tmp_path / (name + '.db')}",
                        handler_paths=tuple(str(f) for f in folders)))


def code_class(job_type: str, name: str = "CodeExecute") -> type:
    return type(name, (CronJobHandler,), {"TYPE": job_type, "__module__": "acme_code",
                                          "handle": lambda self, payload, job: True})


def test_two_apps_with_other_folders_see_only_their_own_handlers(tmp_path):
    loaded_before = registry.default.loaded
    one = app_of(tmp_path, folder_with(tmp_path / "one", OneExecute="acme.one.execute",
                                       TwinExecute="acme.twin.execute"), name="one")
    two = app_of(tmp_path, folder_with(tmp_path / "two", TwoExecute="acme.two.execute",
                                       TwinExecute="acme.twin.execute"), name="two")
    try:
        assert one.resolve("acme.one.execute").__name__ == "OneExecute"
        assert one.resolve("acme.two.execute") is None
        assert two.resolve("acme.two.execute").__name__ == "TwoExecute"
        assert two.resolve("acme.one.execute") is None
        # the same TYPE in both folders: each App has its own class, no conflict
        assert one.resolve("acme.twin.execute") is not two.resolve("acme.twin.execute")
        assert one.handlers.handler_source("acme.twin.execute").startswith(str(tmp_path / "one"))
        assert "acme-one" in one.handlers.tasks() and "acme-one" not in two.handlers.tasks()
        assert registry.default.loaded is loaded_before, "the default registry is not touched"
        assert registry.default.coded("acme.one.execute") is None
    finally:
        one.close()
        two.close()


def test_a_class_registered_by_code_reaches_every_app_while_registered(tmp_path):
    before = app_of(tmp_path, name="before")
    before.handlers.load()
    cls = code_class("acme.coded.execute")
    registry.register(cls.TYPE, cls)
    try:
        after = app_of(tmp_path, name="after")
        for app in (before, after):
            assert app.resolve(cls.TYPE) is cls
            assert app.handlers.registered_handlers()[cls.TYPE] is cls
            assert app.handlers.tasks()["acme-coded"] == cls.TYPE
            assert app.handlers.handler_source(cls.TYPE) == "register()"
        registry.unregister(cls.TYPE)
        for app in (before, after):
            assert app.resolve(cls.TYPE) is None and "acme-coded" not in app.handlers.tasks()
        after.close()
    finally:
        registry.unregister(cls.TYPE)
        before.close()


def test_a_folder_class_that_conflicts_with_a_code_registration_names_both(tmp_path):
    cls = code_class("acme.clash.execute", "CodedClashExecute")
    registry.register(cls.TYPE, cls)
    app = app_of(tmp_path, folder_with(tmp_path / "f", ClashExecute="acme.clash.execute"))
    try:
        with pytest.raises(DuplicateHandlerType) as caught:
            app.handlers.load()
        assert "ClashExecute" in str(caught.value) and "acme_code.CodedClashExecute" in str(
            caught.value)
        assert "registered by code" in str(caught.value)
    finally:
        registry.unregister(cls.TYPE)
        app.close()


def test_a_registration_on_one_app_is_not_seen_by_another_nor_by_the_default(tmp_path):
    one, two = app_of(tmp_path, name="one"), app_of(tmp_path, name="two")
    cls = code_class("acme.mine.execute")
    try:
        one.handlers.register(cls.TYPE, cls)
        assert one.resolve(cls.TYPE) is cls
        assert two.resolve(cls.TYPE) is None
        assert registry.default.coded(cls.TYPE) is None
    finally:
        one.close()
        two.close()


def test_make_test_app_gives_the_app_its_own_registry(tmp_path):
    folder = folder_with(tmp_path / "handlers", LocalExecute="acme.local.execute")
    app = make_test_app(tmp_path / "app", handler_paths=[folder])
    try:
        assert app.handlers is not registry.default
        assert app.resolve("acme.local.execute").__name__ == "LocalExecute"
        assert registry.default.coded("acme.local.execute") is None
        assert "acme.local.execute" not in registry.registered_handlers()
    finally:
        use(None)
        app.close()


def test_settings_and_engine_are_fixed_for_the_apps_life(tmp_path):
    app = app_of(tmp_path)
    try:
        with pytest.raises(AttributeError):
            app.settings = Settings(uptime_urls=("http://example.com/",))
        with pytest.raises(AttributeError):
            app.engine = None
        with pytest.raises(AttributeError):
            app.handlers = registry.default
        assert app.settings.uptime.urls == ()
    finally:
        app.close()
