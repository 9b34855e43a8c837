"""Project-wide guarantees: migrations, the OpenAPI schema, settings parsing, /health."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

import mirix_site
from mirix_site.beat import LockedScheduler
from mirix_site.celery import app as celery_app
from mirix_site.nodes import PROCESSES, node_name_read, node_processes_read

PROJECT_DIR = Path(__file__).resolve().parent.parent


def test_migrations_match_the_models(db: None) -> None:
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_openapi_schema_generates_without_warnings(tmp_path: Path) -> None:
    call_command(
        "spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "schema.yml")
    )
    schema = (tmp_path / "schema.yml").read_text()
    assert "/memory" in schema or "/agents/meta/initialize" in schema


def test_schema_and_docs_are_served(db: None) -> None:
    api = APIClient()
    assert api.get("/api/schema/").status_code == 200
    assert api.get("/api/docs/").status_code == 200


def test_health_reports_both_services(db: None) -> None:
    response = APIClient().get("/health")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "redis": "ok",
        "version": mirix_site.__version__,
        # A web process started alone knows of no other process on its node.
        "node": settings.NODE_NAME,
        "processes": {"web": "running"},
    }


@pytest.fixture
def node_west(settings: Any) -> None:
    """This process is node "west", which runs a web server, a worker and beat."""
    settings.NODE_NAME = "west"
    settings.NODE_PROCESSES = ["web", "worker", "beat"]


def test_health_says_a_node_whose_worker_and_beat_are_not_running_has_them_down(
    node_west: None, db: None
) -> None:
    body = APIClient().get("/health").json()
    assert body["status"] == "ok"  # this web process serves requests all the same
    assert body["node"] == "west"
    assert body["processes"] == {"web": "running", "worker": "down", "beat": "down"}


def test_health_says_the_node_s_worker_runs_and_its_beat_schedules(
    node_west: None, worker: None
) -> None:
    beat = LockedScheduler(app=celery_app)
    try:
        beat.tick()
        body = APIClient().get("/health").json()
    finally:
        beat.close()
    assert body["processes"] == {"web": "running", "worker": "running", "beat": "active"}


def _django_setup(settings_module: str, **environment: str) -> subprocess.CompletedProcess[str]:
    """Start Django in a fresh process with the given environment; return how it went."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings_module, **environment}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SESSION_IDLE_TIMEOUT", "two days"),
        ("RETRIEVAL_LOG_ENABLED", "maybe"),
        ("RETRIEVAL_LOG_RETENTION_DAYS", "thirty"),
        ("LLM_PROVIDER", "skynet"),
        ("API_RATE_LIMIT", "fast"),
        ("DATABASE_URL", "mysql://localhost/x"),
    ],
)
def test_malformed_environment_stops_startup_naming_the_variable(variable: str, value: str) -> None:
    result = _django_setup("mirix_site.settings.local", **{variable: value})
    assert result.returncode != 0
    assert "started" not in result.stdout
    assert variable in result.stderr
    assert "Traceback" in result.stderr  # ImproperlyConfigured, raised at import


NODE_READERS = {
    "NODE_NAME": lambda environ: node_name_read(environ=environ),
    "NODE_PROCESSES": lambda environ: node_processes_read(default=PROCESSES, environ=environ),
}


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("NODE_NAME", "north pole"),  # PostgreSQL's application_name and Celery's node names
        ("NODE_NAME", "n" * 49),
        ("NODE_PROCESSES", "web,cron"),
        ("NODE_PROCESSES", ","),
    ],
)
def test_a_malformed_node_setting_is_refused_naming_it(variable: str, value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=variable):
        NODE_READERS[variable]({variable: value})


def test_a_node_is_named_after_its_machine_unless_named() -> None:
    assert node_name_read(environ={}) == socket.gethostname()[:48]
    assert node_name_read(environ={"NODE_NAME": "north-1.example"}) == "north-1.example"
    assert node_processes_read(default=PROCESSES, environ={}) == list(PROCESSES)
    assert node_processes_read(default=PROCESSES, environ={"NODE_PROCESSES": " web , beat"}) == [
        "web",
        "beat",
    ]


def test_local_settings_start_with_a_clean_environment() -> None:
    result = _django_setup("mirix_site.settings.local")
    assert result.returncode == 0, result.stderr
    assert "started" in result.stdout


def test_production_requires_secret_key() -> None:
    environment = {
        "API_KEY_PEPPER": "p",
        "ENCRYPTION_KEY": "e",
        "FLOWER_BASIC_AUTH": "admin:a-real-password",
        "SECRET_KEY": "",
    }
    result = _django_setup("mirix_site.settings.production", **environment)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr
    environment["SECRET_KEY"] = "a-real-secret"
    assert _django_setup("mirix_site.settings.production", **environment).returncode == 0


def test_create_tenant_command_prints_a_working_key(db: None) -> None:
    out = StringIO()
    call_command("create_tenant", "Acme", "--client", "crm", stdout=out)
    key = next(
        line.split()[-1] for line in out.getvalue().splitlines() if line.startswith("api key")
    )
    api = APIClient()
    api.credentials(HTTP_X_API_KEY=key)
    assert api.get("/users").status_code == 200

    client_id = next(
        line.split()[-1] for line in out.getvalue().splitlines() if line.startswith("client")
    )
    second = StringIO()
    call_command("create_api_key", client_id, "--read-only", stdout=second)
    read_only = APIClient()
    read_only.credentials(HTTP_X_API_KEY=second.getvalue().strip())
    assert read_only.get("/users").status_code == 200
    assert read_only.post("/users/create_or_get", {"user_id": "x"}).status_code == 403

    call_command("revoke_api_key", key, stdout=StringIO())
    assert api.get("/users").status_code == 401
    assert read_only.get("/users").status_code == 200


def test_demo_tenant_reuses_a_working_key(db: None, tmp_path: Path) -> None:
    key_file = tmp_path / "demo-api-key"
    call_command("demo_tenant", "--key-file", str(key_file), stdout=StringIO())
    first = key_file.read_text().strip()
    call_command("demo_tenant", "--key-file", str(key_file), stdout=StringIO())
    assert key_file.read_text().strip() == first
    call_command("revoke_api_key", first, stdout=StringIO())
    call_command("demo_tenant", "--key-file", str(key_file), stdout=StringIO())
    replacement = key_file.read_text().strip()
    assert replacement != first
    api = APIClient()
    api.credentials(HTTP_X_API_KEY=replacement)
    assert api.get("/users").status_code == 200


def test_embedded_postgres_runs_with_the_launchers_settings(db: None) -> None:
    from mirix_site.launcher import POSTGRES_SETTINGS, data_dir

    if str(data_dir() / "pg") not in (connection.settings_dict["HOST"] or ""):
        pytest.skip("an external PostgreSQL (DATABASE_URL): the launcher configured nothing")
    with connection.cursor() as cursor:
        for name, (variable, default) in POSTGRES_SETTINGS.items():
            cursor.execute(
                "SELECT pg_size_bytes(current_setting(%s)) = pg_size_bytes(%s)",
                [name, os.environ.get(variable) or default],
            )
            assert cursor.fetchone() == (True,), name


def test_env_example_lists_every_setting_read_from_the_environment() -> None:
    """DESIGN: `.env.example` lists them all, with their defaults (set, or commented out where
    the default is computed)."""
    settings_dir = PROJECT_DIR / "mirix_site" / "settings"
    read = {
        name
        for path in settings_dir.glob("*.py")
        for name in re.findall(r'env_[a-z_]+\(\s*"([A-Z0-9_]+)"', path.read_text())
    }
    example = (PROJECT_DIR / ".env.example").read_text()
    listed = set(re.findall(r"^#? ?([A-Z0-9_]+)=", example, flags=re.MULTILINE))
    assert len(read) > 50
    assert sorted(read - listed) == []
