"""The built wheel (the production install) ships the service without the development tools, and
``ratings demo`` / ``ratings bench`` on it say what to install instead of failing with a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]

# One module of each production package, the data files the service reads, and the command line.
PRODUCTION_FILES = (
    "engine/rating.py", "engine/fast_replay.py", "schemas/match_finished.py", "schemas/json/match_finished.v1.json",
    "worker/bootstrap.py", "worker/cli/main.py", "worker/service/tasks.py", "worker/service/relay.py",
    "worker/store/rating.py", "worker/store/connection.py", "worker/ops/verify.py", "worker/ops/generate.py",
    "worker/policy/ladders.py", "worker/ladders.toml", "worker/api/app.py", "worker/api/templates/leaderboard.html",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``pip wheel --no-deps`` of a copy of this checkout (pip builds in the source folder, and a
    stale ``build/`` left there by an older build would end up in the wheel)."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".ratings-state", ".hypothesis",
        "node_modules"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
                            "-w", str(out), str(source)], capture_output=True, text=True, timeout=540)
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("match_rating_worker-*.whl")
    return path


def test_the_wheel_holds_the_production_modules_and_no_development_tools(wheel):
    """No file under worker/devtools/ (demo, bench, embedded servers, launchers) is in the wheel;
    every production package, the migrations and the ladders file are."""
    names = zipfile.ZipFile(wheel).namelist()
    devtools = [n for n in names if n.startswith("worker/devtools/")]
    assert devtools == [], f"development tools in the wheel: {devtools}"
    missing = [f for f in PRODUCTION_FILES if f not in names]
    assert missing == [], f"production files missing from the wheel: {missing}"
    assert any(n.startswith("worker/store/migrations/") and n.endswith(".sql") for n in names)


@pytest.fixture(scope="module")
def wheel_install(wheel, tmp_path_factory) -> tuple[str, dict[str, str], Path]:
    """The wheel installed (without dependencies) into a folder: an interpreter, its environment and a
    working folder in which ``import worker`` finds the wheel's files and the dependencies come from
    this environment."""
    root = tmp_path_factory.mktemp("installed")
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                    "--target", str(target), str(wheel)], check=True, capture_output=True, timeout=300)
    # A bare virtual environment whose path holds the wheel's files, then this environment's
    # libraries: on PYTHONPATH, this environment's .pth files (the checkout's editable finder,
    # which would find worker/devtools in the checkout) are not run.
    bare = root / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    python = str(bare / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])
    probe = subprocess.run([python, "-c", "import worker, typer; print(worker.__file__)"], env=env, cwd=root,
                           capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip().startswith(str(target)), probe.stdout + probe.stderr
    # Fail here, not by starting the demo's or bench's servers, if the tools are in the wheel after all.
    tools = subprocess.run([python, "-c", "import worker.devtools"], env=env, cwd=root, capture_output=True,
                           text=True, timeout=60)
    assert "No module named 'worker.devtools'" in tools.stderr, tools.stderr
    return python, env, root


@pytest.mark.parametrize(("command", "extra"), [("demo", "demo"), ("bench", "bench")])
def test_demo_and_bench_on_the_wheel_say_what_to_install(wheel_install, command, extra):
    """Installed from the wheel, the two development commands exit 3 (not ready) with one line naming the
    source checkout's install, without a traceback."""
    python, env, cwd = wheel_install
    done = subprocess.run([python, "-m", "worker", command], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    message = " ".join(done.stderr.split())
    assert f"ratings {command} runs the development tools" in message, message
    assert f"pip install -e '.[{extra}]'" in message, message


def test_generate_runs_from_the_wheel(wheel_install):
    """``ratings generate`` is a production command: its match generator ships in the wheel."""
    python, env, cwd = wheel_install
    done = subprocess.run([python, "-m", "worker", "generate", "--matches", "3", "--players", "4"], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 3
