"""Settings from `CRONJOBS_*` variables and an optional TOML file (variables win);
typos are errors with a "did you mean" hint."""

from __future__ import annotations

import os
import textwrap

import pytest

from conftest import run_cli
from cronjobs.config import Settings, TaskSettings
from cronjobs.errors import ConfigError


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Run in an empty folder, so a stray cronjobs.toml is never read."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def toml(path, body: str):
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def test_defaults_are_the_embedded_setup():
    settings = Settings.load(environ={})
    assert settings.database_url == "sqlite:///cronjobs.db"
    assert settings.broker_url == "memory://"
    assert settings.embedded_broker
    assert settings.timezone == "UTC"
    assert settings.handler_paths == ()
    assert settings.tasks == {}
    assert settings.task("anything") == TaskSettings()


def test_a_section_reads_its_flat_keys_from_file_variables_and_keywords(in_tmp):
    path = toml(in_tmp / "settings.toml", """
        tls_hosts = ["a.example", "b.example:465"]
        backup_keep = 3
        metrics_public = true
        [[uptime_checks]]
        url = "https://c.example/"
    """)
    settings = Settings.load(environ={"CRONJOBS_CONFIG": str(path),
                                      "CRONJOBS_ALERT_SMTP_TO": "ops@example.com, dev@example.com",
                                      "CRONJOBS_HEALTH_TIMEOUT_SECONDS": "2"},
                             dashboard_port=9000)
    assert settings.tls.hosts == ("a.example", "b.example:465")
    assert settings.backup.keep == 3 and settings.backup.dir == "backups"
    assert settings.dashboard.metrics_public and settings.dashboard.port == 9000
    assert [c.url for c in settings.uptime.checks] == ["https://c.example/"]
    assert settings.alerts.smtp_to == ("ops@example.com", "dev@example.com")
    assert settings.health.timeout_seconds == 2
    # the flat key and the section's own name are the same setting
    assert Settings(alert_smtp_port=26) == Settings(alerts={"smtp_port": 26})
    assert Settings(alerts={"smtp_port": 26}, alert_smtp_to="a@example.com").alerts.smtp_port == 26
    keys = Settings.keys()
    assert len(keys) == len(set(keys)) and {"alert_smtp_to", "metrics_public", "tls_hosts",
                                            "database_url", "queues"} <= set(keys)


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("CRONJOBS_ALERT_SMTP_PORT", "0", "invalid setting alert_smtp_port='0': "),
    ("CRONJOBS_TLS_VERIFY", "perhaps", "invalid setting tls_verify='perhaps': "),
    ("CRONJOBS_METRICS_PUBLIC", "perhaps", "invalid setting metrics_public='perhaps': "),
    ("CRONJOBS_UPTIME_CHECKS", '[{"url": "ftp://x"}]', "invalid setting uptime_checks.0.url="),
])
def test_an_error_in_a_section_names_the_variable_key(variable, value, message):
    with pytest.raises(ConfigError) as info:
        Settings.load(environ={variable: value})
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_other_variables_are_ignored():
    settings = Settings.load(environ={"PATH": "/bin", "CRONJOB_TYPO": "x", "HOME": "/root"})
    assert settings.database_url == "sqlite:///cronjobs.db"


def test_environment_beats_toml(in_tmp):
    path = toml(in_tmp / "settings.toml", """
        database_url = "sqlite:///from-toml.db"
        broker_url = "redis://127.0.0.1:6379/0"
        timezone = "Europe/Istanbul"
    """)
    settings = Settings.load(environ={
        "CRONJOBS_CONFIG": str(path),
        "CRONJOBS_DATABASE_URL": "mysql+pymysql://root@127.0.0.1:3306/jobs",
    })
    assert settings.database_url == "mysql+pymysql://root@127.0.0.1:3306/jobs"   # env wins
    assert settings.broker_url == "redis://127.0.0.1:6379/0"                      # from TOML
    assert not settings.embedded_broker
    assert settings.timezone == "Europe/Istanbul"


def test_keyword_overrides_beat_environment():
    settings = Settings.load(environ={"CRONJOBS_DATABASE_URL": "sqlite:///env.db"},
                             database_url="sqlite:///cli.db", broker_url=None)
    assert settings.database_url == "sqlite:///cli.db"
    assert settings.broker_url == "memory://"   # a None override means "not given"


def test_cronjobs_toml_in_the_working_folder_is_read(in_tmp):
    toml(in_tmp / "cronjobs.toml", 'database_url = "sqlite:///here.db"\n')
    assert Settings.load(environ={}).database_url == "sqlite:///here.db"


def test_config_path_that_does_not_exist_is_an_error(in_tmp):
    with pytest.raises(ConfigError, match="missing.toml"):
        Settings.load(environ={"CRONJOBS_CONFIG": str(in_tmp / "missing.toml")})


def test_unreadable_toml_is_an_error(in_tmp):
    toml(in_tmp / "cronjobs.toml", "database_url = \n")
    with pytest.raises(ConfigError, match="cannot read"):
        Settings.load(environ={})


def test_task_tables(in_tmp):
    path = toml(in_tmp / "ops.toml", """
        [tasks.acme-quotasync]
        enabled = false
        frequency = "*/5 * * * *"

        [tasks.cronjobs-cleanup]
        frequency = "day"
    """)
    settings = Settings.load(environ={"CRONJOBS_CONFIG": str(path)})
    assert settings.task("acme-quotasync") == TaskSettings(enabled=False,
                                                           frequency="*/5 * * * *")
    assert settings.task("cronjobs-cleanup") == TaskSettings(enabled=None, frequency="day")
    assert settings.task("http-uptime") == TaskSettings()


def test_unknown_variable_suggests_the_right_name():
    with pytest.raises(ConfigError) as info:
        Settings.load(environ={"CRONJOBS_DATABSE_URL": "sqlite:///x.db"})
    message = str(info.value)
    assert "CRONJOBS_DATABSE_URL" in message
    assert "did you mean CRONJOBS_DATABASE_URL?" in message


def test_unknown_toml_key_suggests_the_right_name(in_tmp):
    path = toml(in_tmp / "c.toml", 'broker_ulr = "redis://127.0.0.1:6379/0"\n')
    with pytest.raises(ConfigError) as info:
        Settings.load(environ={"CRONJOBS_CONFIG": str(path)})
    message = str(info.value)
    assert "'broker_ulr'" in message and str(path) in message
    assert "did you mean broker_url?" in message


def test_unknown_task_key_suggests_the_right_name(in_tmp):
    toml(in_tmp / "cronjobs.toml", """
        [tasks.acme-quotasync]
        frequncy = "hour"
    """)
    with pytest.raises(ConfigError) as info:
        Settings.load(environ={})
    assert "[tasks.acme-quotasync]" in str(info.value)
    assert "did you mean frequency?); the keys are enabled, frequency" in str(info.value)


@pytest.mark.parametrize(("where", "text", "says"), [
    ("env", '{"mail": {"concurency": 1}}',
     "queues.mail.concurency=1: unknown key 'concurency' (did you mean concurrency?); the "
     "keys are concurrency, rate_limit"),
    ("toml", "[queues.mail]\nburst = 3\n",
     "queues.mail.burst=3: unknown key 'burst'; the keys are concurrency, rate_limit"),
    ("toml", '[[uptime_checks]]\nurl = "http://example.com/"\nexpect_stats = 200\n',
     "unknown key 'expect_stats' (did you mean expect_status?)"),
    ("toml", '[[uptime_checks]]\nulr = "http://example.com/"\n',  # not "url: Field required"
     "unknown key 'ulr' (did you mean url?); the keys are url, expect_status, expect_text"),
])
def test_unknown_key_of_a_table_setting_suggests_the_right_name(in_tmp, where, text, says):
    if where == "env":
        environ = {"CRONJOBS_QUEUES": text}
    else:
        toml(in_tmp / "cronjobs.toml", text)
        environ = {}
    with pytest.raises(ConfigError) as info:
        Settings.load(environ=environ)
    assert says in str(info.value)


@pytest.mark.parametrize("source", ["env", "toml"])
def test_bad_time_zone_names_the_value(in_tmp, source):
    if source == "env":
        environ = {"CRONJOBS_TIMEZONE": "Mars/Olympus_Mons"}
    else:
        toml(in_tmp / "cronjobs.toml", 'timezone = "Mars/Olympus_Mons"\n')
        environ = {}
    with pytest.raises(ConfigError) as info:
        Settings.load(environ=environ)
    assert "timezone" in str(info.value)
    assert "Mars/Olympus_Mons" in str(info.value)


def test_time_zone_is_used_when_valid():
    assert Settings.load(environ={"CRONJOBS_TIMEZONE": "Europe/Berlin"}).timezone == "Europe/Berlin"


def test_handler_paths_split_on_os_pathsep(in_tmp):
    first, second = in_tmp / "a", in_tmp / "b"
    value = os.pathsep.join([str(first), "", str(second)])
    settings = Settings.load(environ={"CRONJOBS_HANDLER_PATHS": value})
    assert settings.handler_paths == (str(first), str(second))


def test_handler_paths_from_toml_list(in_tmp):
    toml(in_tmp / "cronjobs.toml", 'handler_paths = ["/srv/handlers", "/opt/more"]\n')
    assert Settings.load(environ={}).handler_paths == ("/srv/handlers", "/opt/more")


def test_bad_value_names_field_and_value():
    with pytest.raises(ConfigError, match="dashboard_port.*'99999'"):
        Settings.load(environ={"CRONJOBS_DASHBOARD_PORT": "99999"})


@pytest.mark.parametrize("frequency", ["every minute", "61 * * * *", "* * * * * *"])
def test_bad_task_frequency_is_refused_at_load(in_tmp, frequency):
    """A typo in an override must not reach the scheduler, where it would break every tick."""
    toml(in_tmp / "cronjobs.toml", f"""
        [tasks.acme-quotasync]
        frequency = "{frequency}"
    """)
    with pytest.raises(ConfigError) as info:
        Settings.load(environ={})
    assert "tasks.acme-quotasync.frequency" in str(info.value)
    assert repr(frequency) in str(info.value)


@pytest.mark.parametrize("environ,message", [
    ({"CRONJOBS_BROKER_URL": "ftp://x"}, "unsupported broker URL 'ftp://x'"),
    ({"CRONJOBS_BROKER_URL": "redis://127.0.0.1:abc/0"},
     "Port could not be cast to integer value as 'abc'.*port \\(a number from 0 to 65535\\)"),
    ({"CRONJOBS_BROKER_URL": "redis://[::1:6379/0"}, "cannot be read \\(Invalid IPv6 URL\\)"),
    ({"CRONJOBS_DATABASE_URL": "nonsense"}, "not a database URL: 'nonsense'"),
])
def test_bad_urls_are_refused_at_load(environ, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        Settings.load(environ=environ)


@pytest.mark.parametrize("url", ["redis://:s3cret@127.0.0.1:99999/0",
                                 "redis://app:s3cret@host:x/0", "ftp://app:s3cret@host"])
def test_a_refused_broker_url_is_shown_without_its_password(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        Settings.load(environ={"CRONJOBS_BROKER_URL": url})
    assert "s3cret" not in str(info.value) and "***" in str(info.value)


@pytest.mark.parametrize("url,use", [
    ("postgres://app:s3cret@db.example/prod", "postgresql+psycopg://app:***@db.example/prod"),
    ("postgresql://app:s3cret@db.example/prod", "postgresql+psycopg://app:***@db.example/prod"),
    ("postgresql+psycopg2://app@db/prod", "postgresql+psycopg://app@db/prod"),
    ("mysql://app:s3cret@db.example/prod", "mysql+pymysql://app:***@db.example/prod"),
    ("mysql+mysqldb://app@db/prod", "mysql+pymysql://app@db/prod"),
    ("mariadb://app@db/prod", "mariadb+pymysql://app@db/prod"),
])
def test_database_urls_of_other_drivers_name_the_url_to_use(url, use, tmp_path):
    """What Heroku, Rails and docker-compose files print: one line naming the URL to
    write instead, the password never shown; the CLI exits 2 with that line alone."""
    with pytest.raises(ConfigError) as info:
        Settings.load(environ={"CRONJOBS_DATABASE_URL": url})
    text = str(info.value)
    assert f"write it as {use}" in text and "s3cret" not in text
    out = run_cli(["tasks"], {**_clean_env(), "CRONJOBS_DATABASE_URL": url}, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: "), out.stderr
    assert f"write it as {use}" in out.stderr and "s3cret" not in out.stderr


@pytest.mark.parametrize("url,message", [
    ("sqlite://cronjobs.db", "names a host: write sqlite:///file.db"),
    ("oracle://scott@db/orcl", "unsupported database 'oracle'"),
])
def test_unusable_database_urls_are_one_line(url, message, tmp_path):
    out = run_cli(["tasks"], {**_clean_env(), "CRONJOBS_DATABASE_URL": url}, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert message in out.stderr


@pytest.mark.parametrize("toml,message", [
    ("tasks = 3\n", "'tasks' in .* must be a table"),
    ('[tasks.x]\nenabled = "yes"\n', "invalid setting tasks.x.enabled='yes'"),
])
def test_bad_task_tables(toml, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cronjobs.toml").write_text(toml)
    with pytest.raises(ConfigError, match=message):
        Settings.load(environ={})


def test_a_toml_file_that_is_not_utf8(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cronjobs.toml").write_bytes(b"timezone = '\xff'\n")
    with pytest.raises(ConfigError, match="cannot read cronjobs.toml"):
        Settings.load(environ={})


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("CRONJOBS_")}
