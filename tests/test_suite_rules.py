"""Rules of the test suite itself, checked on its sources."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, clean_env

SUITES = [ROOT / "tests", ROOT / "examples" / "plugin" / "tests"]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, with its line (``from a import b`` counts ``a`` and
    ``a.b``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    """Shared helpers live in helper modules (tests/helpers.py, conftest.py, ...): importing a
    test module runs its module-level code again under another name and ties two test files'
    edits together."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for suite in SUITES
        for path in sorted(suite.rglob("*.py"))
        for line, module in imported_modules(path)
        if module.rpartition(".")[2].startswith("test_")
        and module.partition(".")[0] in ("tests", "evtrain_example_plugin")
    ]
    assert offenders == []


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text(
        "import tests.test_learn\nfrom tests.writers import test_wandb_writer\n"
        "from tests.helpers import config\n"
    )
    assert [m for _, m in imported_modules(module) if m.rpartition(".")[2].startswith("test_")] == [
        "tests.test_learn",
        "tests.writers.test_wandb_writer",
    ]


FIXTURE_SERVER = '''
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import end_with_the_suite

SERVER = (
    "import os, signal, sys; open('server.tmp', 'w').write(str(os.getpid())); "
    "os.replace('server.tmp', 'server.pid'); signal.pause()"
)


@pytest.fixture(scope="session")
def server():
    """A stand-in for the mlflow server: in a session of its own, as that one is."""
    process = end_with_the_suite(
        subprocess.Popen([sys.executable, "-c", SERVER], start_new_session=True)
    )
    while not Path("server.pid").exists():  # up (the test that runs this bounds the wait)
        assert process.poll() is None
        time.sleep(0.01)
    yield process
    process.kill()


def test_holds_the_server(server):
    Path("test.started").touch()
    signal.pause()
'''


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie left for its new parent counts)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_to_pytest_ends_the_processes_its_fixtures_started(
    tmp_path: Path, name: str
) -> None:
    (tmp_path / "test_server.py").write_text(FIXTURE_SERVER)
    suite = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "test.started").exists():
            assert suite.poll() is None, suite.communicate()[0]
            assert time.monotonic() < deadline, "the test file's test never started"
            time.sleep(0.01)
        server = int((tmp_path / "server.pid").read_text())
        assert not gone(server)
        suite.send_signal(getattr(signal, name))
        output = suite.communicate(timeout=60)[0]
    finally:
        suite.kill()
        suite.wait()
    deadline = time.monotonic() + 30
    while not gone(server) and time.monotonic() < deadline:
        time.sleep(0.01)
    if not gone(server):
        os.kill(server, signal.SIGKILL)
        pytest.fail(f"the fixture's server {server} outlived pytest")
    if name == "SIGINT":  # pytest's own Ctrl-C: its report, exit code 2
        assert suite.returncode == 2 and "KeyboardInterrupt" in output, output
    else:
        assert suite.returncode == -getattr(signal, name), output


TORCHRUN_LOGS = """
import os
import subprocess
from pathlib import Path

from tests.torchrun_runs import TORCHRUN


def test_torchrun_logs_in_the_suites_folder():
    folder = Path(os.environ["PET_LOG_DIR"])
    Path("log_dir").write_text(str(folder))
    command = [str(TORCHRUN), "--standalone", "--nproc-per-node", "1", "--no-python", "true"]
    subprocess.run(command, check=True, timeout=120)
    assert [path.name for path in folder.iterdir()] != []
"""


def test_torchruns_log_folders_go_into_one_folder_removed_when_pytest_ends(
    tmp_path: Path,
) -> None:
    """Each ``torchrun`` makes a log folder (``torchelastic_*`` in ``/tmp`` by default, left
    behind by a killed agent): the suite points them all at one folder (``PET_LOG_DIR``),
    which goes when pytest ends."""
    (tmp_path / "test_torchrun_logs.py").write_text(TORCHRUN_LOGS)
    env = clean_env(PYTHONPATH=str(ROOT))
    env.pop("PET_LOG_DIR", None)  # the outer suite's: this pytest makes its own
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert suite.returncode == 0, suite.stdout + suite.stderr
    log_dir = Path((tmp_path / "log_dir").read_text())
    assert log_dir.name.startswith("evtrain-tests-torchrun-")
    assert not log_dir.exists()
