"""The Node.js packages some tests run (AsyncAPI parser, Node consumer example, celery-node), installed
from their lock files by the tests themselves, so the README's test command needs nothing done by hand."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

NODE_MISSING = ("Node.js and npm are not installed (Debian: apt-get install -y nodejs npm; .ci/run installs "
                "them, and CI counts this skip as a failure)")


def npm_ci(directory: Path) -> str:
    """Make sure ``directory``'s npm packages are installed as its ``package-lock.json`` pins them
    (``npm ci`` unless ``node_modules/.package-lock.json``, written at the end of an install, is
    there); return the ``node`` executable.

    Concurrent sessions or xdist workers install one at a time (a lock file under the system's
    temporary folder). Skips the test, with the install command, when node or npm is missing;
    raises ``subprocess.CalledProcessError`` when ``npm ci`` fails (offline, a bad lock file).
    """
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(NODE_MISSING)
    key = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"ratings-npm-ci-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / "node_modules" / ".package-lock.json").is_file():
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=directory,
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return node
