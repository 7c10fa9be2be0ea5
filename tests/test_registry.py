"""The registry finds handlers in the built-in package, in handler folders and
in `cronjobs.handlers` entry points, and rejects malformed or conflicting classes."""

from __future__ import annotations

import logging
import sys
import textwrap
from pathlib import Path

import pytest

import registry
from cronjobs import CronJobHandler
from cronjobs.config import Settings
from cronjobs.errors import DuplicateHandlerType, HandlerError
from cronjobs.handler import task_name

SAMPLE_HANDLERS = str(Path(__file__).parent / "sample_handlers")
BUILTIN = {
    "cronjobs.cleanup.execute": "builtin: Cleanup.py",
    "cronjobs.health.execute": "builtin: HealthCheck.py",
    "cronjobs.recoverstale.execute": "builtin: RecoverStale.py",
    "http.uptime.discover": "builtin: HttpUptimeDiscover.py",
    "http.uptime.execute": "builtin: HttpUptimeExecute.py",
    "tls.certexpiry.discover": "builtin: TlsCertExpiryDiscover.py",
    "tls.certexpiry.execute": "builtin: TlsCertExpiryExecute.py",
    "db.backup.execute": "builtin: DbBackupExecute.py",
}


@pytest.fixture
def fresh():
    """An empty registry loaded from plain settings (no env, no folders); reset afterwards."""
    registry.reset()
    registry.load(Settings())
    yield registry
    registry.reset()


def handler_class(type_: str | None, frequency: str | None = None, name: str = "H") -> type:
    attrs = {"TYPE": type_, "FREQUENCY": frequency, "handle": lambda self, p, j: True,
             "__module__": "acme_plugin"}
    return type(name, (CronJobHandler,), attrs)


def write(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


# -- sources ------------------------------------------------------------------------------

def test_builtin_scan_finds_the_builtin_types(fresh):
    found = {t: registry.handler_source(t) for t in registry.registered_handlers()
             if (registry.handler_source(t) or "").startswith("builtin")}
    assert found == BUILTIN
    for job_type, source in BUILTIN.items():
        cls = registry.resolve_handler(job_type)
        assert source == f"builtin: {cls.__name__}.py"   # file named after the class
        assert cls.TYPE == job_type


def test_folder_scan_registers_sample_handlers():
    registry.reset()
    try:
        registry.load(Settings(handler_paths=(SAMPLE_HANDLERS,)))
        handlers = registry.registered_handlers()
        for job_type, file in [("test.count.discover", "CountDiscover.py"),
                               ("test.record.execute", "RecordExecute.py"),
                               ("test.shape.execute", "ShapeExecute.py")]:
            assert handlers[job_type].__name__ == Path(file).stem
            assert registry.handler_source(job_type) == str(Path(SAMPLE_HANDLERS) / file)
        assert set(BUILTIN) <= set(handlers)
        assert registry.tasks()["test-count"] == "test.count.discover"
    finally:
        registry.reset()


def test_folder_from_environment_is_scanned(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    settings = Settings.load(environ={"CRONJOBS_HANDLER_PATHS": SAMPLE_HANDLERS})
    registry.reset()
    try:
        registry.load(settings)
        assert registry.resolve_handler("test.count.discover").__name__ == "CountDiscover"
    finally:
        registry.reset()


def test_missing_handler_folder_is_an_error(tmp_path):
    registry.reset()
    try:
        with pytest.raises(HandlerError, match="does not exist"):
            registry.load(Settings(handler_paths=(str(tmp_path / "nope"),)))
    finally:
        registry.reset()


def test_entry_point_plugin_is_registered(tmp_path, monkeypatch):
    """A real (fake) installed distribution: dist-info with entry_points.txt on sys.path.
    An entry point may name a handler class, a module of them, or a callable."""
    write(tmp_path, "fakeplugin_handlers.py", '''
        from cronjobs import CronJobHandler


        class FakePluginDiscover(CronJobHandler):
            TYPE = "fakeplugin.sync.discover"
            FREQUENCY = "hour"

            def handle(self, payload, job):
                return True


        def register_all(register):
            register("fakeplugin.extra.execute", FakeHookExecute)


        class FakeHookExecute(CronJobHandler):
            def handle(self, payload, job):
                return True
    ''')
    write(tmp_path, "fakeplugin_more.py", '''
        from cronjobs import CronJobHandler


        class FakePluginExecute(CronJobHandler):
            TYPE = "fakeplugin.sync.execute"

            def handle(self, payload, job):
                return True
    ''')
    dist = tmp_path / "fakeplugin-0.1.dist-info"
    write(dist, "METADATA", "Metadata-Version: 2.1\nName: fakeplugin\nVersion: 0.1\n")
    write(dist, "entry_points.txt", """\
        [cronjobs.handlers]
        sync = fakeplugin_handlers:FakePluginDiscover
        more = fakeplugin_more
        hook = fakeplugin_handlers:register_all
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fakeplugin_handlers", "fakeplugin_more"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    registry.reset()
    try:
        registry.load(Settings())
        handlers = registry.registered_handlers()
        sources = {t: registry.handler_source(t) for t in handlers}
    finally:
        registry.reset()
        for name in ("fakeplugin_handlers", "fakeplugin_more"):
            sys.modules.pop(name, None)
    assert handlers["fakeplugin.sync.discover"].__name__ == "FakePluginDiscover"
    assert handlers["fakeplugin.sync.execute"].__name__ == "FakePluginExecute"
    assert handlers["fakeplugin.extra.execute"].__name__ == "FakeHookExecute"
    assert sources["fakeplugin.sync.discover"] == ("entry point sync "
                                                   "(fakeplugin_handlers:FakePluginDiscover)")
    assert sources["fakeplugin.sync.execute"] == "entry point more (fakeplugin_more)"
    assert sources["fakeplugin.extra.execute"] == ("entry point hook "
                                                   "(fakeplugin_handlers:register_all)")
    assert {t: sources[t] for t in BUILTIN} == BUILTIN   # the built-ins are still there


def test_entry_point_naming_a_class_without_type_is_an_error(tmp_path, monkeypatch):
    write(tmp_path, "fakebroken_handlers.py", '''
        class NotAHandler:
            pass
    ''')
    dist = tmp_path / "fakebroken-0.1.dist-info"
    write(dist, "METADATA", "Metadata-Version: 2.1\nName: fakebroken\nVersion: 0.1\n")
    write(dist, "entry_points.txt",
          "[cronjobs.handlers]\nbroken = fakebroken_handlers:NotAHandler\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fakebroken_handlers", raising=False)
    registry.reset()
    try:
        with pytest.raises(HandlerError, match="entry point broken.*NotAHandler"):
            registry.load(Settings())
    finally:
        registry.reset()
        sys.modules.pop("fakebroken_handlers", None)


# -- validation ---------------------------------------------------------------------------

def test_duplicate_type_names_both_classes(fresh):
    first = handler_class("acme.quotasync.discover", name="FirstDiscover")
    second = handler_class("acme.quotasync.discover", name="SecondDiscover")
    registry.register(first.TYPE, first, "first.py")
    registry.register(first.TYPE, first, "first.py")   # the same class again is harmless

    with pytest.raises(DuplicateHandlerType) as info:
        registry.register(second.TYPE, second, "second.py")

    message = str(info.value)
    assert "FirstDiscover" in message and "SecondDiscover" in message
    assert "first.py" in message and "second.py" in message
    assert "acme.quotasync.discover" in message
    assert registry.resolve_handler("acme.quotasync.discover") is first


def test_duplicate_type_across_folder_files(tmp_path):
    body = '''
        from cronjobs import CronJobHandler


        class {name}(CronJobHandler):
            TYPE = "acme.twin.execute"

            def handle(self, payload, job):
                return True
    '''
    write(tmp_path, "AlphaExecute.py", body.format(name="AlphaExecute"))
    write(tmp_path, "BetaExecute.py", body.format(name="BetaExecute"))
    registry.reset()
    try:
        with pytest.raises(DuplicateHandlerType, match="AlphaExecute.*BetaExecute"):
            registry.load(Settings(handler_paths=(str(tmp_path),)))
    finally:
        registry.reset()


def test_class_without_type_and_non_handler_are_skipped_with_debug_line(tmp_path, caplog):
    write(tmp_path, "NoTypeDiscover.py", '''
        from cronjobs import CronJobHandler


        class NoTypeDiscover(CronJobHandler):
            def handle(self, payload, job):
                return True
    ''')
    write(tmp_path, "Helper.py", '''
        class Helper:
            TYPE = "acme.helper.execute"
    ''')
    write(tmp_path, "GoodExecute.py", '''
        from cronjobs import CronJobHandler


        class GoodExecute(CronJobHandler):
            TYPE = "acme.good.execute"

            def handle(self, payload, job):
                return True
    ''')
    registry.reset()
    try:
        with caplog.at_level(logging.DEBUG, logger="cronjobs.registry"):
            registry.load(Settings(handler_paths=(str(tmp_path),)))
        handlers = registry.registered_handlers()
    finally:
        registry.reset()
    assert "acme.good.execute" in handlers
    assert "acme.helper.execute" not in handlers
    assert not any(cls.__name__ == "NoTypeDiscover" for cls in handlers.values())
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("NoTypeDiscover" in m and "no TYPE" in m and "NoTypeDiscover.py" in m
               for m in debug), debug
    assert any("Helper" in m and "not a CronJobHandler" in m and "Helper.py" in m
               for m in debug), debug
    # the imported base class is not reported as a class of the file
    assert not any("skipping cronjobs.handler.CronJobHandler" in m for m in debug)


@pytest.mark.parametrize("bad_type", ["acme.quotasync.run", "acme.quotasync", "discover",
                                      "acme.quotasync.Discover"])
def test_type_must_end_in_a_stage(fresh, bad_type):
    cls = handler_class(bad_type, name="BadStage")
    with pytest.raises(HandlerError, match=r"BadStage.*\.discover or \.execute"):
        registry.register(bad_type, cls)
    assert registry.resolve_handler(bad_type) is None


def test_folder_class_with_bad_type_fails_the_load(tmp_path):
    write(tmp_path, "SyncJob.py", '''
        from cronjobs import CronJobHandler


        class SyncJob(CronJobHandler):
            TYPE = "acme.sync.job"

            def handle(self, payload, job):
                return True
    ''')
    registry.reset()
    try:
        with pytest.raises(HandlerError, match="SyncJob.*acme.sync.job"):
            registry.load(Settings(handler_paths=(str(tmp_path),)))
    finally:
        registry.reset()


@pytest.mark.parametrize("frequency", ["every minute", "*/5 * * * * *", "61 * * * *",
                                       "hourly"])
def test_bad_frequency_names_the_class(fresh, frequency):
    cls = handler_class("acme.badfreq.discover", frequency, name="BadFreqDiscover")
    with pytest.raises(HandlerError) as info:
        registry.register(cls.TYPE, cls)
    assert "acme_plugin.BadFreqDiscover" in str(info.value)
    assert repr(frequency) in str(info.value)


def test_register_refuses_a_non_handler(fresh):
    class NotAHandler:
        TYPE = "acme.plain.execute"

    with pytest.raises(HandlerError, match="not a CronJobHandler"):
        registry.register(NotAHandler.TYPE, NotAHandler)


# -- task names ---------------------------------------------------------------------------

@pytest.mark.parametrize("job_type, task", [
    ("acme.quotasync.discover", "acme-quotasync"),
    ("acme.quotasync.execute", "acme-quotasync"),
    ("http.uptime.discover", "http-uptime"),
    ("a.b.c.execute", "a-b-c"),
])
def test_task_name_drops_the_stage_and_hyphenates(job_type, task):
    assert task_name(job_type) == task


def test_resolve_task_type_prefers_frequency_then_discover_then_execute(fresh):
    # both stages, FREQUENCY on neither: the discover stage
    registry.register("acme.quotasync.discover", handler_class("acme.quotasync.discover"))
    registry.register("acme.quotasync.execute", handler_class("acme.quotasync.execute"))
    # FREQUENCY on the execute stage: that one, although a discover exists
    registry.register("acme.report.discover", handler_class("acme.report.discover"))
    registry.register("acme.report.execute", handler_class("acme.report.execute", "day"))
    # only an execute stage
    registry.register("acme.ping.execute", handler_class("acme.ping.execute"))

    assert registry.resolve_task_type("acme-quotasync") == "acme.quotasync.discover"
    assert registry.resolve_task_type("acme-report") == "acme.report.execute"
    assert registry.resolve_task_type("acme-ping") == "acme.ping.execute"
    assert registry.task_types("acme-quotasync") == ["acme.quotasync.discover",
                                                     "acme.quotasync.execute"]
    tasks = registry.tasks()
    assert tasks["acme-quotasync"] == "acme.quotasync.discover"
    assert tasks["acme-report"] == "acme.report.execute"
    assert tasks["http-uptime"] == "http.uptime.discover"
    with pytest.raises(KeyError, match="acme-nothing"):
        registry.resolve_task_type("acme-nothing")


def test_reset_forgets_and_unregister_removes(fresh):
    registry.register("acme.temp.execute", handler_class("acme.temp.execute"))
    registry.unregister("acme.temp.execute")
    assert registry.resolve_handler("acme.temp.execute") is None
    registry.register("acme.temp.execute", handler_class("acme.temp.execute"))
    registry.reset()
    registry.load(Settings())
    assert registry.resolve_handler("acme.temp.execute") is None
    assert set(registry.registered_handlers()) == set(BUILTIN)


@pytest.mark.parametrize("body,message", [
    ("MAX_ATTEMPTS = 0", "MAX_ATTEMPTS must be an integer >= 1, got 0"),
    ("MAX_RUNTIME = -1", "MAX_RUNTIME must be a number of seconds > 0, got -1"),
    ("pass", "does not implement handle(payload, job)"),
])
def test_bad_handler_classes_are_refused(body, message):
    import textwrap

    from cronjobs import CronJobHandler

    namespace = {"CronJobHandler": CronJobHandler}
    code = f"class BadExecute(CronJobHandler):\n    TYPE = 'bad.one.execute'\n    {body}\n"
    if body != "pass":
        code += "    def handle(self, payload, job):\n        return True\n"
    exec(textwrap.dedent(code), namespace)
    with pytest.raises(HandlerError, match=message.replace("(", r"\(").replace(")", r"\)")):
        registry.register("bad.one.execute", namespace["BadExecute"])


def test_a_broken_handler_file_is_one_clear_error(tmp_path):
    from cronjobs.config import Settings

    (tmp_path / "BrokenExecute.py").write_text("def nope(:\n")
    registry.reset()
    with pytest.raises(HandlerError,
                       match=r"cannot load handler file .*BrokenExecute.py: SyntaxError"):
        registry.load(Settings(handler_paths=(str(tmp_path),)))
    assert not registry.default.loaded, "a failed load is not half-remembered"


def test_the_same_folder_twice_is_scanned_once(tmp_path):
    from cronjobs.config import Settings

    (tmp_path / "OneExecute.py").write_text(
        "from cronjobs import CronJobHandler\n\nclass OneExecute(CronJobHandler):\n"
        "    TYPE = 'one.one.execute'\n\n"
        "    def handle(self, payload, job):\n        return True\n")
    registry.reset()
    registry.load(Settings(handler_paths=(str(tmp_path), str(tmp_path) + "/")))
    assert "one.one.execute" in registry.registered_handlers()
