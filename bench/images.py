"""Ingest throughput of turns carrying ~100 KB images, inline (a ``data:`` URL, validated and
stored inside the add) and remote (an ``http://localhost`` URL the worker fetches through the
``IMAGE_FETCH_ALLOW_HOSTS`` allow-list), against text-only adds of the same run.

Each add is a user turn (a short text, and one image in the image phases) and an assistant
turn, sent by ``--threads`` keep-alive connections to ``--users`` users (a user's adds in order
through one connection, one session a phase). Phases: text only; data URL, distinct (PNGs of
seeded noise, which does not compress: equal bytes would dedupe and measure a cache); data URL,
same image (the dedupe path); loopback URL (distinct images this process serves on 127.0.0.1;
the session listings are polled until every image is ``stored``, and the image server must see
one request per image); text only again, so that drift shows. Every add must answer 202. After
each phase the bench waits until every turn is extracted and the worker's queue is empty, so
the next phase meets an idle worker. A remote image refused because ``localhost`` is not on the
allow-list stops the run at the warm-up. Users are named ``bench-images-<UTC time>-<n>``.

    API_RATE_LIMIT=10000000/min IMAGE_FETCH_ALLOW_HOSTS=localhost make run
    .venv/bin/python -m bench.images [--base-url URL] [--api-key KEY] [--adds 1000]
        [--repeat-adds 250] [--threads 4] [--users 20] [--image-bytes 100000] [--smoke]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import random
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, urlencode

from PIL import Image

from bench.common import (
    PROGRESS_EVERY_SECONDS,
    RATE_LIMIT_HINT,
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    LoadResult,
    api_key_read,
    arguments_parse,
    run_load,
    server_arguments,
)

SMOKE = {
    "adds": 8, "repeat_adds": 4, "threads": 2, "users": 2, "warmup": 1, "poll_interval": 0.1,
    "stall_seconds": 30.0,
}  # fmt: skip
# Messages per listing page (25 adds). A page seen all done is not read again: a listing costs
# ~0.3 ms a message, and polling competes with the worker for the CPU.
PAGE_SIZE = 50
# Times the worker's queue is flushed: after the warm-up and after each of the 5 phases.
FLUSHES = 6
# The worker's reason for a name that resolves to loopback but is not on the allow-list.
NOT_PUBLIC = "public internet address"
ALLOW_HOSTS_HINT = (
    "the server refused to fetch from localhost: restart it with IMAGE_FETCH_ALLOW_HOSTS=localhost"
)
ImagePart = dict[str, Any]

# --- Images and the server that hands them out ---------------------------------------------------


def noise_png(rng: random.Random, *, target_bytes: int) -> bytes:
    """A square PNG of random RGB noise, about ``target_bytes`` long (noise does not compress)."""
    side = max(1, int((target_bytes / 3) ** 0.5))
    buffer = io.BytesIO()
    Image.frombytes("RGB", (side, side), rng.randbytes(3 * side * side)).save(
        buffer, format="PNG", compress_level=1
    )
    return buffer.getvalue()


def data_url_part(data: bytes) -> ImagePart:
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    return {"type": "image_url", "image_url": {"url": url}}


class ImageServer(ThreadingHTTPServer):
    """``images[n]`` at ``/img/<n>.png`` on 127.0.0.1, an ephemeral port, a thread a request;
    ``requests`` counts the GETs by path."""

    daemon_threads = True

    def __init__(self, images: list[bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _ImageHandler)
        self.images, self.requests, self.lock = images, dict[str, int](), threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def part(self, index: int) -> ImagePart:
        # localhost, not 127.0.0.1: an address spelled in a URL is refused whatever the list.
        url = f"http://localhost:{self.server_port}/img/{index}.png"
        return {"type": "image_url", "image_url": {"url": url}}


class _ImageHandler(BaseHTTPRequestHandler):
    server: ImageServer

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests[self.path] = self.server.requests.get(self.path, 0) + 1
        match = re.fullmatch(r"/img/(\d+)\.png", self.path)
        if match is None or int(match[1]) >= len(self.server.images):
            self.send_error(404)
            return
        data = self.server.images[int(match[1])]
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


# --- The plan of a phase, and its run ------------------------------------------------------------


@dataclass
class Phase:
    """Every add's body by thread and request number, the sessions they fill and the image bytes
    they carry; once run, how the adds went."""

    label: str
    bodies: list[list[bytes]]
    sessions: dict[tuple[str, str], int]  # (user id, session id) -> adds
    images: int = 0
    image_bytes: int = 0
    load: LoadResult | None = None
    first_add: float = 0.0  # perf_counter
    last_accepted: float = 0.0
    stored_seconds: float | None = None  # remote images: first add to the last seen stored


def phase_plan(
    *,
    label: str,
    key: str,
    user_ids: list[str],
    threads: int,
    adds_per_thread: int,
    image: Callable[[int], tuple[ImagePart, int]] | None = None,
) -> Phase:
    """``image(n)``: add n's image part and its size in bytes (None: no images). A user belongs
    to one thread (``index % threads``), so its adds arrive in order."""
    users_of_thread = [user_ids[index::threads] for index in range(threads)]
    phase = Phase(label=label, bodies=[[] for _ in range(threads)], sessions={})
    for index in range(threads):
        for number in range(adds_per_thread):
            user_id = users_of_thread[index][number % len(users_of_thread[index])]
            session = (user_id, f"{user_id}-{key}")
            phase.sessions[session] = phase.sessions.get(session, 0) + 1
            add = index * adds_per_thread + number
            content: list[ImagePart] = [
                {"type": "text", "text": f"Picture {add} of the {key} set, from my walk today."}
            ]
            if image is not None:
                part, size = image(add)
                content.append(part)
                phase.images, phase.image_bytes = phase.images + 1, phase.image_bytes + size
            body = {
                "user_id": user_id,
                "session_id": session[1],
                "messages": [
                    {"role": "user", "content": content},
                    {"role": "assistant", "content": f"A fine picture, number {add}."},
                ],
            }
            phase.bodies[index].append(json.dumps(body).encode())
    return phase


def phase_run(base_url: str, headers: dict[str, str], phase: Phase) -> None:
    first_sent = [float("inf")] * len(phase.bodies)

    def request(index: int, number: int) -> tuple[str, str, bytes]:
        if number == 0:
            first_sent[index] = time.perf_counter()
        return "POST", "/memory/add", phase.bodies[index][number]

    load = run_load(
        label=phase.label,
        base_url=base_url,
        headers=headers,
        threads=len(phase.bodies),
        requests_per_thread=len(phase.bodies[0]),
        request=request,
    )
    phase.load, phase.first_add, phase.last_accepted = load, min(first_sent), time.perf_counter()
    if set(load.statuses) != {202}:
        hints = {401: "the API key was refused", 429: RATE_LIMIT_HINT}
        hint = next((hints[code] for code in load.statuses if code in hints), "see its log")
        raise BenchError(f"{phase.label}: adds answered {load.statuses}, expected 202 ({hint})")
    print(load.line(), flush=True)


# --- Watching sessions until their turns are done ------------------------------------------------


@dataclass
class SessionWatch:
    """A session of a phase, and how much of it the listing showed done."""

    user_id: str
    session_id: str
    messages: int
    images: int
    cursor: str = ""  # the first page not seen all done
    skipped: tuple[int, int] = (0, 0)  # messages and images of the pages before it
    done: int = 0  # messages done at the last sweep
    done_at: float | None = None  # perf_counter at the end of the sweep that saw them all
    image_ids: set[str] = field(default_factory=set)


def watches_of(phase: Phase) -> list[SessionWatch]:
    return [
        SessionWatch(user_id, session_id, messages=2 * adds, images=adds if phase.images else 0)
        for (user_id, session_id), adds in phase.sessions.items()
    ]


def _message_done(message: dict[str, Any], *, extraction: bool, image_ids: set[str]) -> bool:
    done = True
    for image in message["images"]:
        if image["status"] == "failed":
            hint = f"; {ALLOW_HOSTS_HINT}" if NOT_PUBLIC in image["reason"] else ""
            raise BenchError(f"an image of message {message['id']} failed: {image['reason']}{hint}")
        if image["status"] == "stored" and image["image_id"]:
            image_ids.add(image["image_id"])
        else:  # pending, or fetched but its link not yet updated
            done = False
    if extraction:
        if message["extraction"] == "failed":
            raise BenchError(f"the extraction of message {message['id']} failed")
        done = done and message["extraction"] == "processed"
    return done


def watch_sweep(client: KeepAliveClient, watch: SessionWatch, *, extraction: bool) -> None:
    (done, images), cursor, advancing = watch.skipped, watch.cursor, True
    while cursor is not None:
        query = urlencode({"user_id": watch.user_id, "limit": PAGE_SIZE, "cursor": cursor})
        path = f"/sessions/{quote(watch.session_id)}/messages?{query}"
        status, payload = client.request("GET", path)
        if status != 200 or not isinstance(payload, dict):
            raise BenchError(f"GET {path}: {status} {payload}")
        page = payload["results"]
        page_done = sum(
            _message_done(message, extraction=extraction, image_ids=watch.image_ids)
            for message in page
        )
        done, images = done + page_done, images + sum(len(message["images"]) for message in page)
        cursor = payload.get("next_cursor")
        advancing = advancing and page_done == len(page) and cursor is not None
        if advancing:
            watch.cursor, watch.skipped = cursor, (done, images)
    watch.done = done
    if done == watch.messages:
        if images != watch.images:
            raise BenchError(f"{watch.session_id} lists {images} images, {watch.images} were sent")
        watch.done_at = time.perf_counter()


def wait_until_done(
    client: KeepAliveClient,
    watches: list[SessionWatch],
    *,
    extraction: bool,
    poll_interval: float,
    stall_seconds: float,
    started: float | None = None,
) -> tuple[float, int, float]:
    """Sweep every ``poll_interval`` s until every session is done (every image stored; with
    ``extraction``, every turn extracted too); BenchError when nothing moved for
    ``stall_seconds``. With ``started``, progress every 10 s. Returns (when the last session was
    seen done, sweeps, seconds spent sweeping)."""
    sweeps, sweeping, last_change, last_seen = 0, 0.0, time.perf_counter(), -1
    next_report = time.perf_counter() + PROGRESS_EVERY_SECONDS
    total = sum(watch.messages for watch in watches)
    while pending := [watch for watch in watches if watch.done_at is None]:
        began = time.perf_counter()
        for watch in pending:
            watch_sweep(client, watch, extraction=extraction)
        now = time.perf_counter()
        sweeps, sweeping = sweeps + 1, sweeping + now - began
        seen = sum(watch.done for watch in watches)
        if seen != last_seen:
            last_change, last_seen = now, seen
        elif now - last_change > stall_seconds:
            raise BenchError(
                f"nothing done for {stall_seconds:.0f} s ({seen} of {total} messages): is the "
                "Celery worker running? Look at the image fetches and extraction jobs in the admin."
            )
        if started is not None and now >= next_report:
            print(f"  {now - started:7.1f} s  {seen:>7} of {total} messages done", flush=True)
            next_report = now + PROGRESS_EVERY_SECONDS
        # At least as long as the sweep took: polling takes at most half of a server thread.
        time.sleep(max(poll_interval - (now - began), now - began))
    return max(watch.done_at or 0.0 for watch in watches), sweeps, sweeping


# --- The run -------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server_arguments(parser)
    parser.add_argument("--adds", type=int, default=1000, help="two-turn adds per phase")
    parser.add_argument("--repeat-adds", type=int, default=250, help="adds of the same image")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--image-bytes", type=int, default=100_000, help="size of each image")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up adds per thread and kind")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds")
    parser.add_argument(
        "--stall-seconds", type=float, default=120.0, help="give up when nothing moves this long"
    )
    parser.add_argument("--seed", type=int, default=1)
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    if not arguments.threads <= min(arguments.users, arguments.repeat_adds, arguments.adds):
        parser.error("need --threads <= --users, --repeat-adds and --adds")
    try:
        return _run(arguments, api_key_read(arguments))
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{arguments.base_url}: {error} (is the server running?)", file=sys.stderr)
        return 1


def _run(arguments: argparse.Namespace, api_key: str) -> int:  # noqa: PLR0915 (one script)
    threads, adds_per_thread = arguments.threads, arguments.adds // arguments.threads
    warmups = threads * arguments.warmup
    # To the microsecond: two runs within a second (the smoke test's refused run, then its
    # real one) must not share users, or a session lists the other run's images too.
    run = "bench-images-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    users = [f"{run}-{index}" for index in range(arguments.users)]
    warmup_users = [f"{run}-warmup-{index}" for index in range(threads)]
    headers = {"X-API-Key": api_key, "Content-Type": "application/json"}

    # Up front, so that no add waits on the client's PNG encoder. The remote images have one
    # more for each time the worker's queue is flushed.
    began, count = time.perf_counter(), warmups + adds_per_thread * threads
    rng = random.Random(arguments.seed)
    generated = [
        noise_png(rng, target_bytes=arguments.image_bytes) for _ in range(2 * count + FLUSHES + 1)
    ]
    if len(set(generated)) != len(generated):
        raise BenchError("two generated images are identical; try another --seed")
    inline, remote, same = generated[:count], generated[count:-1], generated[-1]
    server = ImageServer(remote)
    print(
        f"{len(generated)} images of {statistics.fmean(map(len, generated)) / 1000:.1f} kB mean "
        f"generated in {time.perf_counter() - began:.1f} s, served on 127.0.0.1:"
        f"{server.server_port}; {adds_per_thread * threads} two-turn adds a phase "
        f"({arguments.repeat_adds // threads * threads} of the same image) from {threads} "
        f"threads to {len(users)} users, users {run}-*, {arguments.base_url}",
        flush=True,
    )

    def inline_from(offset: int) -> Callable[[int], tuple[ImagePart, int]]:
        return lambda add: (data_url_part(inline[offset + add]), len(inline[offset + add]))

    def remote_from(offset: int) -> Callable[[int], tuple[ImagePart, int]]:
        return lambda add: (server.part(offset + add), len(remote[offset + add]))

    plan = partial(phase_plan, user_ids=users, threads=threads, adds_per_thread=adds_per_thread)
    warm_plan = partial(plan, user_ids=warmup_users, adds_per_thread=arguments.warmup)

    client = KeepAliveClient(arguments.base_url, api_key)
    poll = {"poll_interval": arguments.poll_interval, "stall_seconds": arguments.stall_seconds}
    # The warm-up's sessions and the flushes', beside the phases'.
    other_watches: list[SessionWatch] = []
    flushes = 0

    def flush() -> float:
        """One add naming a new remote image, queued after everything before it: once it is
        stored the worker's queue (FIFO) is empty, the extraction tasks that will find nothing
        to claim included. Returns when it was seen stored."""
        nonlocal flushes
        marker = plan(
            label="flush",
            key=f"flush-{flushes}",
            user_ids=[f"{run}-flush"],
            threads=1,
            adds_per_thread=1,
            image=remote_from(count + flushes),
        )
        flushes += 1
        status, payload = client.request("POST", "/memory/add", marker.bodies[0][0])
        if status != 202:
            raise BenchError(f"POST /memory/add answered {status} {payload}, expected 202")
        other_watches.extend(watches_of(marker))
        return wait_until_done(client, other_watches[-1:], extraction=False, **poll)[0]

    phases: list[tuple[Phase, list[SessionWatch]]] = []
    try:
        if arguments.warmup:
            began = time.perf_counter()
            for phase in (
                warm_plan(label="warm-up text", key="warm-text"),
                warm_plan(label="warm-up data URL", key="warm-data", image=inline_from(0)),
                warm_plan(label="warm-up loopback URL", key="warm-url", image=remote_from(0)),
            ):
                phase_run(arguments.base_url, headers, phase)
                other_watches.extend(watches_of(phase))
            wait_until_done(client, other_watches, extraction=True, **poll)
            print(f"warm-up: {3 * warmups} adds done in {flush() - began:.1f} s")
        for phase in (
            plan(label="text only (before)", key="text-before"),
            plan(label="data URL, distinct", key="data", image=inline_from(warmups)),
            plan(
                label="data URL, same image",
                key="same",
                image=lambda _add: (data_url_part(same), len(same)),
                adds_per_thread=arguments.repeat_adds // threads,
            ),
            plan(label="loopback URL", key="url", image=remote_from(warmups)),
            plan(label="text only (after)", key="text-after"),
        ):
            phase_run(arguments.base_url, headers, phase)
            if phase.label == "loopback URL":
                _loopback_report(client, phase, watches_of(phase), poll)
            # Every image stored and every turn extracted: the next phase meets an idle worker.
            watches = watches_of(phase)
            phases.append((phase, watches))
            extracted, _, _ = wait_until_done(client, watches, extraction=True, **poll)
            print(
                f"  worker idle again: {2 * len(phase.load.latencies_ms)} turns extracted "
                f"{extracted - phase.last_accepted:.1f} s after the last add, its queue empty "
                f"{flush() - phase.last_accepted:.1f} s after",
                flush=True,
            )
    finally:
        client.close()
        server.shutdown()
        server.server_close()

    wrong = _summary(phases, other_watches, server, warmups=warmups, flushes=flushes)
    if arguments.smoke:
        print(SMOKE_NOTE)
    return 1 if wrong else 0


def _loopback_report(
    client: KeepAliveClient, phase: Phase, watches: list[SessionWatch], poll: dict[str, float]
) -> None:
    """Images fetched and stored, from the first add until the last was seen stored."""
    for watch in watches:
        watch_sweep(client, watch, extraction=False)
    during = len(set().union(*(watch.image_ids for watch in watches)))
    print(
        f"  stored while adds arrived: {during} of {phase.images} images within "
        f"{time.perf_counter() - phase.first_add:.1f} s of the first add"
    )
    stored, sweeps, sweeping = wait_until_done(
        client, watches, extraction=False, started=phase.first_add, **poll
    )
    seconds = phase.stored_seconds = stored - phase.first_add
    print(
        f"  add to stored: {phase.images} images in {seconds:.1f} s from the first add "
        f"({max(0.0, stored - phase.last_accepted):.1f} s after the last add was accepted) -> "
        f"{phase.images / seconds:.1f} images/s, {phase.image_bytes / seconds / 1e6:.2f} MB/s "
        "fetched and stored"
    )
    print(
        f"  (polling: {sweeps} sweeps taking {sweeping:.1f} s; a stored time is known to within "
        f"one sweep, every {poll['poll_interval']} s)"
    )


def _summary(
    phases: list[tuple[Phase, list[SessionWatch]]],
    other_watches: list[SessionWatch],
    server: ImageServer,
    *,
    warmups: int,
    flushes: int,
) -> bool:
    """The phases side by side, and the checks of what was stored: True when one failed."""
    by_label = {phase.label: phase for phase, _ in phases}
    baselines = [by_label["text only (before)"].load, by_label["text only (after)"].load]
    base_rate = statistics.fmean(load.requests_per_second for load in baselines)
    base_p50 = statistics.fmean(load.percentile(0.5) for load in baselines)
    print(
        "\nsummary (x: against the mean of the two text-only phases; images: distinct ids "
        "listed; image MB/s: in the accepted adds, for loopback URL fetched and stored)\n"
        f"{'phase':<22} {'adds':>6} {'adds/s':>8} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'adds/s x':>9} {'p50 x':>7} {'images':>7} {'image MB/s':>11}"
    )
    wrong = []
    for phase, watches in phases:
        load, ids = phase.load, set().union(*(watch.image_ids for watch in watches))
        expected = 1 if phase.label == "data URL, same image" else phase.images
        if len(ids) != expected:
            wrong.append(f"{phase.label}: {len(ids)} distinct images listed, {expected} expected")
        seconds = phase.stored_seconds or load.seconds
        rate = f"{phase.image_bytes / seconds / 1e6:11.2f}" if phase.images else f"{'-':>11}"
        print(
            f"{phase.label:<22} {len(load.latencies_ms):>6} {load.requests_per_second:8.1f} "
            f"{load.percentile(0.5):8.2f} {load.percentile(0.95):8.2f} "
            f"{load.requests_per_second / base_rate:9.2f} {load.percentile(0.5) / base_p50:7.2f} "
            f"{len(ids):>7} {rate}"
        )
    requests = sum(server.requests.values())
    distinct = warmups + by_label["loopback URL"].images + flushes
    if not requests == distinct == len(server.requests):
        wrong.append("the image server did not have exactly one request per image")
    print(
        f"image server: {requests} requests for {distinct} distinct images "
        f"({warmups} of them the warm-up's, {flushes} the queue flushes')"
    )
    watches = other_watches + [watch for _, phase_watches in phases for watch in phase_watches]
    stored = set().union(*(watch.image_ids for watch in watches))
    print(f"images this run stored: {len(stored)} distinct (warm-up and flushes included)")
    for line in wrong:
        print(f"NOT as expected: {line}", file=sys.stderr)
    return bool(wrong)


if __name__ == "__main__":
    sys.exit(main())
