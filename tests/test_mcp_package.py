"""The MCP program's own distribution (mirix_site/mcp) installs where the server is not: into
an empty virtualenv, from this repository, with the MCP SDK and an HTTP client only."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mirix_site.launcher import PROJECT_DIR

pytestmark = pytest.mark.slow

# What the server needs and an MCP client of it must not pull in.
SERVER_ONLY = {
    "mirix-site",
    "django",
    "djangorestframework",
    "celery",
    "psycopg",
    "torch",
    "sentence-transformers",
    "transformers",
    "onnxruntime",
    "numpy",
    "scipy",
}
# The README's figure for the whole virtualenv (45 MB when written), with room for the SDK's
# next releases; the server's is 1.9 GB.
MOST_BYTES = 80 * 2**20


def _pip(python: Path, *arguments: str) -> str:
    finished = subprocess.run(  # noqa: S603 - pip, on our own package
        [sys.executable, "-m", "pip", "--python", str(python), *arguments],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    return finished.stdout


def test_the_light_package_installs_into_an_empty_virtualenv_without_the_server(
    tmp_path: Path,
) -> None:
    # Built from a copy: a build in the source folder would leave its files in the checkout.
    source = shutil.copytree(
        PROJECT_DIR / "mirix_site" / "mcp",
        tmp_path / "mcp",
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # noqa: S603
    python = venv / "bin" / "python"
    _pip(python, "install", "--quiet", str(source))

    installed = {
        package["name"].lower().replace("_", "-")
        for package in json.loads(_pip(python, "list", "--format", "json"))
    }
    assert {"mirix-site-mcp", "mcp", "httpx2"} <= installed
    assert not installed & SERVER_ONLY, installed & SERVER_ONLY
    size = sum(path.stat().st_size for path in venv.rglob("*") if path.is_file())
    assert size < MOST_BYTES, f"{size / 2**20:.0f} MB"

    # It runs from there, on its own: without its settings it says which is missing.
    finished = subprocess.run(  # noqa: S603 - the program just installed
        [str(venv / "bin" / "mirix-mcp")],
        env={},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 2
    assert "MIRIX_API_KEY is not set" in finished.stderr
