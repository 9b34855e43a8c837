"""Running in production: Flower's logins (FLOWER_BASIC_AUTH) are required and parsed strictly,
and Flower started as `make run` starts it asks for them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from django.core.exceptions import ImproperlyConfigured

from mirix_site.launcher import PROJECT_DIR, flower_command
from tests.processes import _wait_for, environment_on_test_database, free_port, process_running

PRODUCTION_SECRETS = {"SECRET_KEY": "s", "API_KEY_PEPPER": "p", "ENCRYPTION_KEY": "e"}
MALFORMED_LOGINS = ["admin", "admin:", ":secret", "admin: secret", "admin:secret,", "a:b,,c:d"]


def _django_setup(settings_module: str, **environment: str) -> subprocess.CompletedProcess[str]:
    """Start Django in a fresh process with the given environment; return how it went."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings_module, **environment}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print('started', settings.FLOWER_BASIC_AUTH)",
        ],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_production_stops_at_start_without_flowers_logins() -> None:
    result = _django_setup(
        "mirix_site.settings.production", **PRODUCTION_SECRETS, FLOWER_BASIC_AUTH=""
    )
    assert result.returncode != 0 and "started" not in result.stdout
    assert "FLOWER_BASIC_AUTH is required and not set" in result.stderr


@pytest.mark.parametrize("value", MALFORMED_LOGINS)
def test_malformed_flower_logins_stop_any_settings_at_start(value: str) -> None:
    for module in ("mirix_site.settings.production", "mirix_site.settings.local"):
        result = _django_setup(module, **PRODUCTION_SECRETS, FLOWER_BASIC_AUTH=value)
        assert result.returncode != 0 and "started" not in result.stdout
        assert "Environment variable FLOWER_BASIC_AUTH is invalid" in result.stderr


def test_production_starts_with_flowers_logins() -> None:
    result = _django_setup(
        "mirix_site.settings.production",
        **PRODUCTION_SECRETS,
        FLOWER_BASIC_AUTH="admin:pass:word,ops:other",
    )
    assert result.returncode == 0, result.stderr
    # A password may hold a colon: the user ends at the first one, as in HTTP basic auth.
    assert result.stdout.split(maxsplit=1) == ["started", "['admin:pass:word', 'ops:other']\n"]


def test_local_settings_need_no_flower_logins() -> None:
    result = _django_setup("mirix_site.settings.local", FLOWER_BASIC_AUTH="")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "started []\n"


@pytest.mark.parametrize("value", MALFORMED_LOGINS)
def test_make_run_refuses_malformed_flower_logins_before_starting(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="FLOWER_BASIC_AUTH"):
        flower_command(port=5555, environ={"FLOWER_BASIC_AUTH": value})


def test_the_flower_make_run_starts_asks_for_its_logins(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    environment = environment_on_test_database(FLOWER_BASIC_AUTH="admin:s3cret,ops:other")
    command = flower_command(port=port, environ=environment)
    assert not [argument for argument in command if "s3cret" in argument]  # not in `ps`

    def answers() -> bool:
        try:
            return requests.get(url, timeout=5).status_code == 401
        except requests.RequestException:
            return False

    with process_running("flower", command, environment, tmp_path / "flower.log") as flower:
        _wait_for(flower, answers)
        assert requests.get(url, auth=("admin", "s3cret"), timeout=5).status_code == 200
        assert requests.get(url, auth=("ops", "other"), timeout=5).status_code == 200
        assert requests.get(url, auth=("admin", "other"), timeout=5).status_code == 401
        # Flower's own SIGTERM handler can hang its shutdown; nothing of it is kept anyway.
        os.killpg(flower.popen.pid, signal.SIGKILL)
        flower.popen.wait()


def test_flower_with_production_settings_stops_at_start_without_its_logins(
    tmp_path: Path,
) -> None:
    environment = environment_on_test_database(
        **PRODUCTION_SECRETS,
        DJANGO_SETTINGS_MODULE="mirix_site.settings.production",
        FLOWER_BASIC_AUTH="",
    )
    command = flower_command(port=free_port(), environ=environment)
    result = subprocess.run(  # noqa: S603 - our own program
        command,
        cwd=PROJECT_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "FLOWER_BASIC_AUTH is required and not set" in result.stderr
