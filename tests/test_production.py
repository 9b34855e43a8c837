"""Running in production: Flower's logins (FLOWER_BASIC_AUTH) are required and parsed strictly,
Flower started as `make run` starts it asks for them, and the compose file of
docs/production starts every process with settings that production accepts."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml
from django.core.exceptions import ImproperlyConfigured
from django.core.management import get_commands, load_command_class

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


COMPOSE_FILE = PROJECT_DIR / "docs" / "production" / "docker-compose.yml"
# What an operator puts in docs/production/.env for the required `${NAME:?...}` variables.
OPERATOR_VALUES = {
    "POSTGRES_PASSWORD": "pg-secret",
    "SECRET_KEY": "a-real-secret",
    "API_KEY_PEPPER": "a-real-pepper",
    "ENCRYPTION_KEY": "a-real-key",
    "FLOWER_BASIC_AUTH": "admin:a-real-password",
}
# Variables of the processes themselves rather than of the settings.
PROCESS_VARIABLES = {"DJANGO_SETTINGS_MODULE", "PROMETHEUS_MULTIPROC_DIR"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::([?-])([^}]*))?\}")


def _interpolated(value: object) -> str:
    """A value as Compose interpolates it, with the operator's values for required variables."""

    def replace(match: re.Match[str]) -> str:
        name, kind, default = match.groups()
        if kind == "?":
            return OPERATOR_VALUES[name]
        return default or ""

    return _VARIABLE.sub(replace, str(value))


def _app_services() -> dict[str, dict]:
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return {name: service for name, service in services.items() if "build" in service}


def test_the_compose_file_runs_every_process_of_the_server() -> None:
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    assert services["db"]["image"] == "pgvector/pgvector:pg16"
    assert set(_app_services()) == {"migrate", "web", "worker", "beat", "flower"}
    for service in _app_services().values():
        assert service["build"]["dockerfile"] == "docs/production/Dockerfile"
        assert (COMPOSE_FILE.parent / service["build"]["context"] / "manage.py").exists()


def test_every_variable_the_compose_file_sets_is_a_documented_setting() -> None:
    documented = set(
        re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", (PROJECT_DIR / ".env.example").read_text(), re.M)
    )
    for name, service in _app_services().items():
        unknown = set(service["environment"]) - documented - PROCESS_VARIABLES
        assert not unknown, f"{name} sets {unknown}, which .env.example does not list"


@pytest.mark.parametrize("service", ["migrate", "web", "worker", "beat", "flower"])
def test_each_process_of_the_compose_file_starts_production_settings(service: str) -> None:
    environment = {
        name: _interpolated(value)
        for name, value in _app_services()[service]["environment"].items()
    }
    assert environment["DJANGO_SETTINGS_MODULE"] == "mirix_site.settings.production"
    result = _django_setup("mirix_site.settings.production", **environment)
    assert result.returncode == 0, result.stderr
    # Without one of the operator's secrets it stops at start, naming it.
    result = _django_setup(
        "mirix_site.settings.production", **{**environment, "FLOWER_BASIC_AUTH": ""}
    )
    assert result.returncode != 0 and "FLOWER_BASIC_AUTH" in result.stderr


def test_the_commands_the_migrate_service_runs_exist_with_those_options(db: None) -> None:
    script = _app_services()["migrate"]["command"][-1]
    commands = get_commands()
    steps = [shlex.split(step) for step in script.split("&&")]
    assert [step[2] for step in steps] == [
        "migrate",
        "calibrate_gate",
        "calibrate_action_grouping",
        "collectstatic",
    ]
    for step in steps:
        assert step[:2] == ["python", "manage.py"]
        name, arguments = step[2], step[3:]
        command = load_command_class(commands[name], name)
        command.create_parser("manage.py", name).parse_args(arguments)  # exits on a bad option
