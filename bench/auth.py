"""Authenticated ``GET /users`` against unauthenticated ``GET /health`` on the same server.

Both endpoints touch PostgreSQL and Redis once or more: /health runs ``SELECT 1`` and a Redis
PING; /users authenticates the key (one indexed query + HMAC), counts the request in the
per-key rate limiter (one Redis round trip) and reads one page of users. The difference of
their latencies is the cost of authentication, throttling and the tenant-scoped query.

Run against a live server (``make run`` in another terminal, with the rate limit raised so the
benchmark measures the limiter rather than hits it):

    API_RATE_LIMIT=10000000/min make run
    .venv/bin/python -m bench.auth [--base-url URL] [--api-key KEY] [--threads 4] [--requests 5000]
        [--smoke]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench.common import (
    SMOKE_NOTE,
    BenchError,
    LoadResult,
    api_key_read,
    arguments_parse,
    run_load,
    server_arguments,
)

SMOKE = {"threads": 2, "requests": 20, "warmup": 10}


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server_arguments(parser)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--requests", type=int, default=5000, help="per thread and endpoint")
    parser.add_argument("--rounds", type=int, default=2, help="alternating health/users rounds")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured requests per thread")
    return arguments_parse(parser, argv, smoke=SMOKE)


def measure(arguments: argparse.Namespace, api_key: str) -> dict[str, LoadResult]:
    """Both endpoints, each merged over its rounds."""
    common = {"base_url": arguments.base_url, "threads": arguments.threads}

    # Warm every worker process and connection before measuring.
    run_load(
        label="warm-up",
        headers={"X-API-Key": api_key},
        requests_per_thread=arguments.warmup,
        request=lambda _t, _n: ("GET", "/users", None),
        **common,
    )

    results = {"health": [], "users": []}
    per_round = max(1, arguments.requests // arguments.rounds)
    for _ in range(arguments.rounds):
        # Alternating rounds, so drift in this shared machine's speed hits both alike.
        results["health"].append(
            run_load(
                label="GET /health",
                headers={},
                requests_per_thread=per_round,
                request=lambda _t, _n: ("GET", "/health", None),
                **common,
            )
        )
        results["users"].append(
            run_load(
                label="GET /users (authenticated)",
                headers={"X-API-Key": api_key},
                requests_per_thread=per_round,
                request=lambda _t, _n: ("GET", "/users?limit=10", None),
                **common,
            )
        )

    merged = {}
    for name, rounds in results.items():
        first = rounds[0]
        for extra in rounds[1:]:
            first.latencies_ms.extend(extra.latencies_ms)
            first.seconds += extra.seconds
            for status, count in extra.statuses.items():
                first.statuses[status] = first.statuses.get(status, 0) + count
        merged[name] = first
    return merged


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _arguments(argv)
    try:
        merged = measure(arguments, api_key_read(arguments))
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{arguments.base_url}: {error} (is the server running?)", file=sys.stderr)
        return 1

    per_endpoint = len(merged["health"].latencies_ms) // arguments.threads
    print(
        f"{arguments.threads} threads x {per_endpoint} requests per endpoint, {arguments.base_url}"
    )
    for result in merged.values():
        print(result.line())
    delta = merged["users"].percentile(0.5) - merged["health"].percentile(0.5)
    print(f"authenticated p50 - health p50 = {delta:+.2f} ms (goal: within 2 ms)")
    if arguments.smoke:
        print(SMOKE_NOTE)
    if set(merged["users"].statuses) != {200} or set(merged["health"].statuses) != {200}:
        print(
            "non-200 answers seen: raise API_RATE_LIMIT for the server under test", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
