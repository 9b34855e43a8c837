"""A node: one machine's process group of the server (its web server, Celery worker and Celery
beat, as ``python -m mirix_site.launcher run`` starts them), one of several sharing one
PostgreSQL and one Redis. Nodes come and go: none keeps anything another needs (DESIGN §2).

What names a node and what it runs, read alike by the settings (before Django is set up: this
module needs no Django set up), the launcher, the Celery worker and ``GET /health``. Beat runs
on every node and schedules on one: ``mirix_site.beat``.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

from mirix_site.settings.env import env_list, env_str

# What a node may run; /health reports the first three.
PROCESSES = ("web", "worker", "beat", "flower")
# Short enough to fit PostgreSQL's application_name (63 bytes) after beat's prefix.
NODE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,47}$")
# A worker's sign of life for its node's /health (a Redis key that expires): set every
# WORKER_HEARTBEAT_SECONDS, gone WORKER_HEARTBEAT_TTL seconds after the last.
WORKER_HEARTBEAT_SECONDS = 5.0
WORKER_HEARTBEAT_TTL = 15


def node_name_read(*, environ: Mapping[str, str] | None = None) -> str:
    """``NODE_NAME``, or the machine's host name: nodes on separate machines need no setting;
    two nodes on one machine must each be given a name."""
    value = env_str("NODE_NAME", environ=environ)
    if value is None:
        host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).lstrip("._-")
        return host[:48] or "node"
    if not NODE_NAME_PATTERN.match(value):
        raise ImproperlyConfigured(
            f"Environment variable NODE_NAME={value!r} is invalid: expected 1-48 letters, "
            "digits, dots, dashes or underscores, starting with a letter or digit."
        )
    return value


def node_processes_read(
    *, default: tuple[str, ...], environ: Mapping[str, str] | None = None
) -> list[str]:
    """``NODE_PROCESSES``: what this node runs, some of ``PROCESSES``."""
    return env_list("NODE_PROCESSES", default, choices=PROCESSES, environ=environ)


def worker_heartbeat_key(node: str) -> str:
    return f"mirix:node:{node}:worker"
