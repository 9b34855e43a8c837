#!/usr/bin/env python
"""Django's command-line utility; starts the embedded services when no URLs are configured."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        from mirix_site.launcher import services_ensure

        services_ensure()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
