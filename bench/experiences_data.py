"""The experiences benches' generated data, from a seed: 40 subjects x 20 symptoms make the
tasks, 200 actions, the experiences with their outcomes, and queries paraphrased from the tasks
(``bench.experiences``'s docstring says how). ``bench.experiences`` stores and asks them,
``bench.embedding_runtime`` embeds their texts, ``bench.recommend_path`` asks its tasks. Its top
level imports only the standard library: Mimir's python imports it with ``bench.experiences``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

# Per kind of system: its 5 subjects (name, the short name a query may use) and 25 actions.
KINDS: dict[str, tuple[list[tuple[str, str]], list[str]]] = {
    "web service": (
        [
            ("checkout service", "checkout"),
            ("payments API", "payments"),
            ("search API", "search"),
            ("user profile service", "profile service"),
            ("notification service", "notifications"),
        ],
        [
            "added a Redis read-through cache in front of the hot lookups",
            "raised the HTTP connection pool from 20 to 100",
            "set client timeouts to 2 s with one retry and jitter",
            "rolled back to the previous release",
            "added a circuit breaker around the downstream call",
            "moved the slow call to a background job",
            "enabled HTTP keep-alive to the upstream",
            "batched the N+1 database queries into one",
            "added an index on the lookup column",
            "increased gunicorn workers from 4 to 8",
            "switched the JSON encoder to orjson",
            "turned on response compression",
            "added request coalescing for identical reads",
            "rate limited the noisy client",
            "pinned the HTTP library to the last good version",
            "profiled with py-spy and removed the hot regex",
            "cached the auth token instead of fetching it per request",
            "moved session state out of process memory",
            "fixed the leaking goroutine in the retry loop",
            "raised the container memory limit to 2 GiB",
            "added a bulkhead thread pool per dependency",
            "warmed the cache before shifting traffic",
            "scaled the deployment out to 12 replicas",
            "disabled the debug logging left on in production",
            "replaced the sequential fan-out with parallel requests",
        ],
    ),
    "database": (
        [
            ("orders PostgreSQL cluster", "orders database"),
            ("inventory MySQL replica", "inventory replica"),
            ("session Redis", "session store"),
            ("analytics ClickHouse", "ClickHouse"),
            ("catalog Elasticsearch", "catalog index"),
        ],
        [
            "ran VACUUM ANALYZE on the bloated tables",
            "added a covering index for the slow query",
            "put PgBouncer in transaction mode in front of the database",
            "raised max_connections and tuned work_mem",
            "split the long transaction into batches of 1,000 rows",
            "moved the heavy reads to a replica",
            "increased shared_buffers to a quarter of RAM",
            "rewrote the query to avoid a sequential scan",
            "partitioned the events table by month",
            "set a statement timeout of 5 s",
            "killed the runaway analytics query",
            "enabled slow query logging and fixed the top offender",
            "set maxmemory-policy to allkeys-lru",
            "resized the instance to the next tier",
            "reordered lock acquisition to avoid the deadlock",
            "rebuilt the fragmented index concurrently",
            "turned off synchronous replication to the far region",
            "archived rows older than a year",
            "raised the WAL retention of the replication slot",
            "switched the hot counter to an append-only table",
            "increased the checkpoint interval",
            "added read-your-writes routing for the session",
            "expired keys in batches instead of all at once",
            "moved the data disk to provisioned IOPS storage",
            "restored the replica from a fresh base backup",
        ],
    ),
    "messaging": (
        [
            ("order events Kafka topic", "order events"),
            ("email RabbitMQ queue", "email queue"),
            ("billing SQS consumer", "billing consumer"),
            ("webhook dispatcher", "webhooks"),
            ("audit log pipeline", "audit log"),
        ],
        [
            "increased the number of topic partitions",
            "scaled the consumer group to 8 instances",
            "added a dead-letter queue for poison messages",
            "made the consumer idempotent with a dedup key",
            "raised the prefetch count",
            "lowered the prefetch count to 1",
            "batched the acknowledgements",
            "extended the visibility timeout to 5 minutes",
            "compressed messages with zstd",
            "split the topic by tenant",
            "moved the slow handler to its own queue",
            "added exponential backoff to redelivery",
            "increased the broker's disk and retention",
            "set a max message size and rejected larger payloads",
            "replaced per-message commits with periodic offset commits",
            "restarted the stuck consumer",
            "stopped the rebalance storm by raising the session timeout",
            "throttled the producer at the source",
            "purged the expired messages",
            "upgraded the client library to fix the reconnect bug",
            "added a heartbeat to the long-running handler",
            "moved to a lazy queue to keep memory flat",
            "sharded the queue across two brokers",
            "paused the backfill during peak hours",
            "replayed the failed batch from the archive",
        ],
    ),
    "frontend": (
        [
            ("web storefront", "storefront"),
            ("admin dashboard", "dashboard"),
            ("iOS app", "iOS"),
            ("Android app", "Android"),
            ("marketing site", "marketing pages"),
        ],
        [
            "code-split the bundle by route",
            "lazy-loaded the images below the fold",
            "loaded the third-party tags after first paint",
            "added a service worker cache for static assets",
            "server-side rendered the landing page",
            "debounced the search input",
            "virtualized the long list",
            "fixed the leak in the event listener cleanup",
            "pinned the analytics SDK to the previous minor version",
            "served assets from the CDN with long cache headers",
            "preloaded the critical font",
            "shrank the bundle by dropping moment.js",
            "added retry with backoff to the API client",
            "moved the heavy work to a web worker",
            "turned the feature flag back off",
            "fixed the race between two state updates",
            "converted the images to WebP",
            "removed the blocking synchronous XHR",
            "capped the polling interval at 30 s",
            "added an error boundary around the widget",
            "cleared stale local storage on version change",
            "upgraded the framework to the patched release",
            "inlined the critical CSS",
            "shipped a hotfix build through expedited review",
            "prefetched the next page's data on hover",
        ],
    ),
    "delivery pipeline": (
        [
            ("build pipeline", "build"),
            ("integration test suite", "integration tests"),
            ("release deployer", "deployer"),
            ("artifact registry", "registry"),
            ("canary rollout", "canary"),
        ],
        [
            "cached dependencies between pipeline runs",
            "split the test suite across 8 parallel runners",
            "quarantined the flaky tests",
            "pinned the base image digest",
            "retried the network-dependent steps once",
            "raised the runner's memory to 8 GiB",
            "moved the integration tests to a nightly job",
            "fixed the test order dependency",
            "added a health check gate before promoting",
            "reduced the first canary step to 5 % of traffic",
            "rebuilt the runner image with the missing toolchain",
            "cleaned old artifacts with a retention policy",
            "switched to a shallow clone",
            "ran the migrations before the deploy instead of during it",
            "added an automatic rollback on error budget burn",
            "vendored the dependencies for reproducible builds",
            "mocked the external payment sandbox",
            "set a timeout on every pipeline step",
            "increased the artifact upload chunk size",
            "moved the secrets to the vault integration",
            "replaced sleep-based waits with readiness polling",
            "serialized deploys with a lock",
            "upgraded the CI agent",
            "enabled layer caching for the Docker builds",
            "deleted the stale lock file",
        ],
    ),
    "infrastructure": (
        [
            ("Kubernetes ingress", "ingress"),
            ("edge CDN", "CDN"),
            ("internal DNS", "DNS servers"),
            ("VPN gateway", "VPN"),
            ("node autoscaler", "autoscaler"),
        ],
        [
            "raised the ingress controller's worker connections",
            "increased the load balancer idle timeout to 120 s",
            "added a pod disruption budget",
            "set CPU requests to match real usage",
            "removed the CPU limit to stop throttling",
            "added a node pool with more memory",
            "rotated the expired TLS certificate",
            "lowered the DNS TTL before the migration",
            "scaled CoreDNS and enabled the node-local DNS cache",
            "raised the conntrack table size",
            "moved the workload to a less crowded zone",
            "tuned the autoscaler's scale-down delay",
            "enabled connection draining on the load balancer",
            "fixed the MTU mismatch on the tunnel",
            "added a readiness probe that checks the real dependency",
            "drained and replaced the bad node",
            "increased the ephemeral storage limit",
            "purged the CDN cache for the stale paths",
            "set up anycast failover to the second region",
            "raised the file descriptor limit",
            "pinned the kernel to the previous version",
            "enabled TCP keep-alive on the gateway",
            "spread the replicas with topology constraints",
            "cleaned up the orphaned persistent volumes",
            "switched the balancer to least connections",
        ],
    ),
    "machine learning": (
        [
            ("recommendation model server", "recommender"),
            ("feature store", "features"),
            ("training cluster", "training jobs"),
            ("embedding service", "embeddings"),
            ("fraud scoring model", "fraud model"),
        ],
        [
            "quantized the model to int8",
            "batched inference requests in a 10 ms window",
            "moved inference to a GPU node",
            "cached predictions for repeated inputs",
            "reduced the max sequence length",
            "retrained on the last 30 days of data",
            "rolled back to the previous model version",
            "validated feature values at serving time",
            "fixed the training-serving skew in the feature pipeline",
            "precomputed the embeddings offline",
            "warmed the model up before routing traffic",
            "lowered the number of intra-op threads",
            "exported the model to ONNX Runtime",
            "pinned the tokenizer version",
            "fell back to the rules-based scorer",
            "sharded the store by entity id",
            "raised the cache TTL of online features",
            "checkpointed training every 1,000 steps",
            "lowered the learning rate and added warm-up",
            "trained with mixed precision",
            "increased the data loader workers",
            "filtered the corrupt training records",
            "added drift monitoring with an alert",
            "distilled the model into a smaller one",
            "recalibrated the decision threshold",
        ],
    ),
    "data pipeline": (
        [
            ("nightly ETL job", "ETL"),
            ("data warehouse loader", "warehouse load"),
            ("Spark reporting job", "reporting job"),
            ("CDC replication", "change data capture"),
            ("metrics aggregator", "metrics rollup"),
        ],
        [
            "made the job incremental instead of a full reload",
            "increased the executor memory",
            "repartitioned by the join key to fix the skew",
            "broadcast the small dimension table",
            "started the job after the upstream export finishes",
            "added a data quality check before publishing",
            "deduplicated on the primary key during the load",
            "compacted the small files",
            "switched the storage format to Parquet",
            "pushed the filter down to the source query",
            "shortened the connector heartbeat interval",
            "backfilled the missing partition",
            "added retries with backoff to the extract step",
            "dropped late events with a watermark",
            "raised the warehouse's concurrency slots",
            "materialized the intermediate view",
            "pinned the schema and rejected unknown columns",
            "split the job into per-day tasks",
            "cached the lookup table in memory",
            "set the session time zone to UTC",
            "sorted the table by the filter column",
            "restarted the connector from the last committed offset",
            "added an index on the staging table",
            "reduced the shuffle partitions",
            "killed and reran the stuck task",
        ],
    ),
}

# Each symptom with two paraphrases a query may use instead.
SYMPTOMS: list[tuple[str, tuple[str, str]]] = [
    (
        "p99 latency spikes after deploy",
        ("tail latency jumps after a release", "slow responses right after deploying"),
    ),
    (
        "memory grows until the process is OOM-killed",
        ("out of memory kills every few hours", "memory leak, restarted by the OOM killer"),
    ),
    ("intermittent 502 errors", ("random bad gateway errors", "sporadic 502s from the proxy")),
    (
        "CPU pegged at 100% during peak traffic",
        ("high CPU at peak hours", "CPU saturation under peak load"),
    ),
    ("connection pool exhausted", ("runs out of connections", "too many connections errors")),
    ("disk fills up overnight", ("disk full every morning", "running out of disk space at night")),
    (
        "requests time out under load",
        ("timeouts when traffic is high", "calls hang and time out at high load"),
    ),
    (
        "serves stale data after an update",
        ("old values shown after writes", "stale reads after changes"),
    ),
    (
        "flaky failures that pass on retry",
        ("intermittent failures that go away when rerun", "nondeterministic failures"),
    ),
    (
        "slow cold start after scaling up",
        ("new instances take minutes to be ready", "slow startup on scale-out"),
    ),
    (
        "error rate doubles when traffic doubles",
        ("errors grow with traffic", "error spike at high request rates"),
    ),
    ("backlog keeps growing", ("work piles up faster than it drains", "lag increases all day")),
    ("TLS handshake failures", ("certificate errors on connect", "SSL handshake errors")),
    ("logs flooded with retries", ("retry storm in the logs", "endless retry messages")),
    (
        "deadlocks under concurrent writes",
        ("deadlocks when writes overlap", "transactions deadlock under contention"),
    ),
    (
        "throughput drops after a config change",
        ("slower after the configuration rollout", "capacity fell after changing settings"),
    ),
    ("long garbage collection pauses", ("GC pauses freeze requests", "stop-the-world pauses")),
    (
        "DNS resolution failures",
        ("cannot resolve hostnames intermittently", "name lookup errors"),
    ),
    (
        "high latency in one availability zone",
        ("one zone much slower than the others", "zone-specific slowness"),
    ),
    (
        "crash loop after upgrade",
        ("keeps restarting since the upgrade", "crashes on boot after updating"),
    ),
]

TASK_DETAILS = [
    "in eu-west-1", "since Tuesday", "on 3 of 12 pods", "during the nightly batch",
    "after the traffic doubled", "reported by on-call", "on the new hardware", "for EU tenants",
]  # fmt: skip
ENVIRONMENTS = ["prod", "prod", "prod", "staging"]
REGIONS = ["eu-west-1", "us-east-1", "ap-southeast-2"]
BEST_ACTION_SHARE = 0.3
BEST_ACTION_BONUS = 1.0
OUTCOME_SHARES = (("success", 0.6), ("partial", 0.1), ("failure", 0.3))  # in latent order
SUBJECTLESS_QUERY_SHARE = 0.15
QUERY_DETAILS = [
    "again", "in prod", "since this morning", "after Friday's rollout", "during the sale",
    "at 3 am", "for EU tenants", "on the canary", "right now", "every night", "since the migration",
    "on two nodes", "for the big customer", "after the failover", "in staging too", "this week",
]  # fmt: skip
QUERY_DETAIL_SHARE = 0.6
# Words a partial query must not end on ("CDN throughput drops after a").
DANGLING_WORDS = frozenset(
    {"a", "an", "the", "after", "on", "in", "at", "of", "until", "when", "that", "during",
     "under", "to", "with", "is", "keeps"}
)  # fmt: skip


@dataclass(frozen=True)
class Subject:
    name: str
    alias: str
    kind: str
    actions: tuple[str, ...]


def subjects_list() -> list[Subject]:
    subjects = [
        Subject(name, alias, kind, tuple(actions))
        for kind, (named, actions) in KINDS.items()
        for name, alias in named
    ]
    actions = [action for _subjects, kind_actions in KINDS.values() for action in kind_actions]
    # The shape; a typo in the lists above must not change it silently.
    assert len(subjects) == 40 and len(SYMPTOMS) == 20, "40 subjects x 20 symptoms"
    assert len(set(actions)) == len(actions) == 200, "200 distinct actions"
    return subjects


@dataclass(frozen=True)
class Data:
    """The experiences (as the API takes them) and the queries (recall's, recommend's, the
    warm-up's, and those asked of both for one task: all distinct), with what scores the
    answers: every stored task text's (subject, symptom) pair, each query's pair (None: it names
    no subject), and each pair's best action."""

    experiences: list[dict[str, Any]]
    recall_queries: list[str]
    recommend_queries: list[str]
    warmup: list[str]
    pair_queries: list[str]
    pair_of_task: dict[str, tuple[int, int]]
    pair_of_query: dict[str, tuple[int, int] | None]
    best_actions: dict[tuple[int, int], str]


def _task_text(rng: random.Random, subject: Subject, symptom: str) -> str:
    form = rng.randrange(3)
    if form == 0:
        return f"{subject.name}: {symptom}"
    if form == 1:
        return f"{symptom} on the {subject.name}"
    return f"{subject.name}: {symptom} ({rng.choice(TASK_DETAILS)})"


def _query_text(rng: random.Random, subject: Subject | None, symptom_index: int) -> str:
    symptom, paraphrases = SYMPTOMS[symptom_index]
    phrase = rng.choice(paraphrases)
    detail = f" {rng.choice(QUERY_DETAILS)}" if rng.random() < QUERY_DETAIL_SHARE else ""
    if subject is None:
        # Two details: a symptom alone has few phrasings, and a run's queries must be its own.
        first, second = rng.sample(QUERY_DETAILS, 2)
        return f"{phrase} {first}, {second}"
    name = rng.choice((subject.name, subject.alias, subject.alias))
    form = rng.randrange(4)
    if form == 0:
        return f"{name} {phrase}{detail}"
    if form == 1:
        return f"{phrase} in the {name}{detail}"
    if form == 2:
        # Partial: the first words of the stored symptom itself, without a dangling "after a".
        words = symptom.split()[: max(2, len(symptom.split()) - 2)]
        while len(words) > 2 and words[-1] in DANGLING_WORDS:
            words.pop()
        return f"{name} {' '.join(words)}{detail}"
    return f"why does the {name} have {phrase}{detail}?"


def data_generate(
    *,
    experiences: int,
    queries: int,
    warmup: int,
    seed: int,
    query_seed: str,
    pair_queries: int = 0,
) -> Data:
    """The experiences from ``seed``; the queries from ``query_seed``, which a run makes its own
    so that the server's cache of query embeddings (24 h) holds none of them. ``pair_queries``
    more are drawn last (to be asked as recall then recommend), so the others are the same
    draws whatever their number."""
    subjects = subjects_list()
    rng = random.Random(seed)
    pairs = [(subject, symptom) for subject in range(len(subjects)) for symptom in range(20)]
    best_actions = {pair: rng.choice(subjects[pair[0]].actions) for pair in pairs}

    drafts: list[tuple[float, dict[str, Any]]] = []
    pair_of_task: dict[str, tuple[int, int]] = {}
    for _ in range(experiences):
        pair = rng.choice(pairs)
        subject = subjects[pair[0]]
        best = best_actions[pair]
        if rng.random() < BEST_ACTION_SHARE:
            action = best
        else:
            action = rng.choice([other for other in subject.actions if other != best])
        task = _task_text(rng, subject, SYMPTOMS[pair[1]][0])
        pair_of_task[task] = pair
        latent = rng.gauss(0.0, 1.0) + (BEST_ACTION_BONUS if action == best else 0.0)
        context = {"environment": rng.choice(ENVIRONMENTS), "region": rng.choice(REGIONS)}
        drafts.append((latent, {"task": task, "action": action, "context": context}))

    # Exact outcome shares: the top of the latent order succeeds, the bottom fails.
    by_latent = sorted(range(experiences), key=lambda index: drafts[index][0], reverse=True)
    start = 0
    for position, (outcome, share) in enumerate(OUTCOME_SHARES):
        end = (
            experiences
            if position == len(OUTCOME_SHARES) - 1
            else start + round(share * experiences)
        )
        for index in by_latent[start:end]:
            drafts[index][1]["outcome"] = outcome
        start = end

    stored = set(pair_of_task)
    rng = random.Random(query_seed)
    pair_of_query: dict[str, tuple[int, int] | None] = {}
    while len(pair_of_query) < 2 * queries + warmup + pair_queries:
        symptom = rng.randrange(20)
        if rng.random() < SUBJECTLESS_QUERY_SHARE:
            subject_index = None
            text = _query_text(rng, None, symptom)
        else:
            subject_index = rng.randrange(len(subjects))
            text = _query_text(rng, subjects[subject_index], symptom)
        if text not in stored and text not in pair_of_query:
            pair_of_query[text] = None if subject_index is None else (subject_index, symptom)
    taken = list(pair_of_query)
    return Data(
        experiences=[body for _latent, body in drafts],
        recall_queries=taken[:queries],
        recommend_queries=taken[queries : 2 * queries],
        warmup=taken[2 * queries : 2 * queries + warmup],
        pair_queries=taken[2 * queries + warmup :],
        pair_of_task=pair_of_task,
        pair_of_query=pair_of_query,
        best_actions=best_actions,
    )
