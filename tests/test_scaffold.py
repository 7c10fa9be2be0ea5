"""`cronjobs new-handler NAME [--discover]` writes a handler (or a discover/execute
pair) and a test into the first handler folder, refuses to overwrite, and the generated
test passes as generated."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import run_cli
from cronjobs.cli.handlerfiles import ScaffoldError, class_base, files


def env_with(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONJOBS_")}
    env.update(CRONJOBS_DATABASE_URL=f"sqlite:///{tmp_path / 'cj.db'}", **extra)
    return env


def pytest_in(folder, test_file) -> subprocess.CompletedProcess:
    """Run the generated test as a user would, outside this repository's pytest config."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "error", str(test_file)], cwd=folder, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("discover", [False, True])
def test_new_handler_writes_files_that_register_and_pass_their_test(tmp_path, discover):
    env = env_with(tmp_path, CRONJOBS_HANDLER_PATHS=os.pathsep.join(["handlers", "more"]))
    (tmp_path / "more").mkdir()
    args = ["new-handler", "acme.quota_sync"] + (["--discover"] if discover else [])
    out = run_cli(args, env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    written = sorted(p.name for p in (tmp_path / "handlers").iterdir())
    want = ["AcmeQuotaSyncExecute.py", "pytest.ini", "test_acme_quota_sync.py"]
    assert written == sorted(want + (["AcmeQuotaSyncDiscover.py"] if discover else []))
    assert list((tmp_path / "more").iterdir()) == []  # only the first folder
    for name in written:
        assert f"wrote handlers/{name}" in out.stdout

    listing = run_cli(["list-handlers"], env, cwd=tmp_path).stdout
    lines = {line.split()[0]: line for line in listing.splitlines()[1:]}
    assert "acme.quota_sync.execute" in lines
    assert "handlers/AcmeQuotaSyncExecute.py" in lines["acme.quota_sync.execute"]
    if discover:  # scheduled with a macro, shown expanded
        assert "@hourly (0 * * * *)" in lines["acme.quota_sync.discover"]
    assert not any("test_acme" in line for line in lines.values())  # the test file is not loaded

    ran = pytest_in(tmp_path, tmp_path / "handlers" / "test_acme_quota_sync.py")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"{3 if discover else 2} passed" in ran.stdout


def test_the_folder_gets_one_pytest_ini_and_keeps_its_own(tmp_path):
    """The first handler of a folder brings a pytest.ini (pytest's rootdir stops there);
    the next one, or a folder with a pytest.ini of its own, keeps the file as it is."""
    env = env_with(tmp_path, CRONJOBS_HANDLER_PATHS="handlers")
    first = run_cli(["new-handler", "acme.one"], env, cwd=tmp_path)
    assert "wrote handlers/pytest.ini" in first.stdout, first.stdout + first.stderr
    ini = tmp_path / "handlers" / "pytest.ini"
    assert ini.read_text().rstrip().endswith("[pytest]")
    ini.write_text("[pytest]\naddopts = -vv\n")
    second = run_cli(["new-handler", "acme.two"], env, cwd=tmp_path)
    assert second.returncode == 0 and "pytest.ini" not in second.stdout, second.stdout
    assert ini.read_text() == "[pytest]\naddopts = -vv\n"
    ran = pytest_in(tmp_path, "handlers")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.count(" PASSED") == 4, ran.stdout  # its own addopts (-vv) applied


def test_refuses_to_overwrite_and_writes_nothing(tmp_path):
    env = env_with(tmp_path, CRONJOBS_HANDLER_PATHS="handlers")
    (tmp_path / "handlers").mkdir()
    mine = tmp_path / "handlers" / "test_acme_quota_sync.py"
    mine.write_text("# my own test\n")
    out = run_cli(["new-handler", "acme.quota_sync", "--discover"], env, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr == "error: refusing to overwrite handlers/test_acme_quota_sync.py\n"
    assert [p.name for p in (tmp_path / "handlers").iterdir()] == ["test_acme_quota_sync.py"]
    assert mine.read_text() == "# my own test\n"


@pytest.mark.parametrize("args, message", [
    (["new-handler", "Acme.Quota"], "NAME must be lowercase words separated by dots"),
    (["new-handler", "acme..quota"], "NAME must be lowercase words separated by dots"),
    (["new-handler", "acme.quota.execute"], "NAME is the type without its stage: use 'acme.quota'"),
    (["new-handler", "acme.quota"], "no handler folder: set CRONJOBS_HANDLER_PATHS"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = run_cli(args, env_with(tmp_path), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("error: " + message), out.stderr
    assert list(tmp_path.iterdir()) == []


def test_folder_option_and_names():
    assert class_base("acme.quota_sync") == "AcmeQuotaSync"
    assert class_base("tour") == "Tour"
    assert sorted(files("tour")) == ["TourExecute.py", "test_tour.py"]
    with pytest.raises(ScaffoldError):
        files("tour.discover")


def test_without_pytest_the_hint_names_the_testing_extra(tmp_path):
    """A plain `pip install cronjobs` has no pytest: the hint says how to get it, and the
    wheel offers it as the `testing` extra."""
    env = env_with(tmp_path, CRONJOBS_HANDLER_PATHS="handlers")
    code = "import sys; sys.modules['pytest'] = None; from cronjobs.cli import main; main()"
    out = subprocess.run([sys.executable, "-c", code, "new-handler", "acme.greet"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"pytest is not installed in this venv ({sys.prefix}): pip install pytest" in out.stdout
    assert "cronjobs[testing]" not in run_cli(["new-handler", "acme.other"], env,
                                              cwd=tmp_path).stdout  # pytest is here
    from importlib.metadata import metadata

    requires = metadata("cronjobs").get_all("Requires-Dist")
    assert any(r.startswith("pytest") and "extra == 'testing'" in r.replace('"', "'")
               for r in requires)
