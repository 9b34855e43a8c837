"""The retrieval engine's tables move from the memory app to this one. Only Django's record
of the models moves (``SeparateDatabaseAndState`` with no database operations): the tables keep
their names (``Meta.db_table``), rows, indexes and constraints; nothing is copied. The content
types (and so the permissions and admin log entries naming them) follow the models."""

import django.db.models.deletion
from django.db import migrations, models

MOVED = [
    "posting",
    "termstats",
    "documentstats",
    "gatecalibration",
    "retrievallog",
    "embeddingspace",
    "searchablekindcode",
]


def content_types_follow(apps, schema_editor) -> None:  # noqa: ANN001
    content_types = apps.get_model("contenttypes", "ContentType")
    content_types.objects.filter(app_label="memory", model__in=MOVED).update(app_label="search")


def content_types_return(apps, schema_editor) -> None:  # noqa: ANN001
    content_types = apps.get_model("contenttypes", "ContentType")
    content_types.objects.filter(app_label="search", model__in=MOVED).update(app_label="memory")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("accounts", "0004_end_user_clients"),
        ("contenttypes", "0002_remove_content_type_name"),
        # The tables are memory's migrations' (0003 to 0011): this claims them as they stand.
        ("memory", "0012_agent_prompt_versions"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="EmbeddingSpace",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("model", models.CharField(max_length=100, unique=True)),
                        ("provider", models.CharField(max_length=16)),
                        ("dimensions", models.PositiveIntegerField()),
                        ("api_base", models.CharField(blank=True, max_length=500)),
                        (
                            "status",
                            models.CharField(
                                choices=[("building", "Building"), ("ready", "Ready")],
                                default="building",
                                max_length=8,
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("completed_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "memory_embeddingspace",
                    },
                ),
                migrations.CreateModel(
                    name="SearchableKindCode",
                    fields=[
                        (
                            "code",
                            models.PositiveSmallIntegerField(primary_key=True, serialize=False),
                        ),
                        ("name", models.CharField(max_length=64)),
                        ("recorded_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        "db_table": "memory_searchablekindcode",
                        "ordering": ["code"],
                    },
                ),
                migrations.CreateModel(
                    name="GateCalibration",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("model", models.CharField(max_length=100)),
                        (
                            "kind",
                            models.CharField(
                                blank=True,
                                default="",
                                help_text="A searchable kind's name; blank: every kind.",
                                max_length=64,
                            ),
                        ),
                        (
                            "min_similarity",
                            models.FloatField(
                                help_text="Below it a result is dropped, unless BM25 ranked it in its top 3 or (memories) scored it at least 0.7 of its best."
                            ),
                        ),
                        (
                            "strong_similarity",
                            models.FloatField(help_text="At or above it a result ranks first."),
                        ),
                        ("related_pairs", models.PositiveIntegerField(default=0)),
                        ("unrelated_pairs", models.PositiveIntegerField(default=0)),
                        ("related_mean", models.FloatField(default=0)),
                        ("unrelated_mean", models.FloatField(default=0)),
                        ("measured_at", models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        "db_table": "memory_gatecalibration",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("model", "kind"), name="gate_calibration_unique"
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="DocumentStats",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("kind", models.PositiveSmallIntegerField()),
                        ("doc_count", models.IntegerField(default=0)),
                        ("total_length", models.BigIntegerField(default=0)),
                        (
                            "client",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.client",
                            ),
                        ),
                        (
                            "end_user",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.enduser",
                            ),
                        ),
                        (
                            "organization",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.organization",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "memory_documentstats",
                        "indexes": [
                            models.Index(
                                fields=["organization", "kind"], name="document_stats_org"
                            ),
                            models.Index(fields=["client"], name="document_stats_client"),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("end_user", "client", "kind"), name="document_stats_unique"
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Posting",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("kind", models.PositiveSmallIntegerField()),
                        ("lexeme", models.TextField()),
                        ("document_id", models.BigIntegerField()),
                        ("tf", models.PositiveIntegerField()),
                        ("doc_length", models.PositiveIntegerField()),
                        (
                            "client",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.client",
                            ),
                        ),
                        (
                            "end_user",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.enduser",
                            ),
                        ),
                        (
                            "organization",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.organization",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "memory_posting",
                        "indexes": [
                            models.Index(
                                fields=["end_user", "kind", "lexeme", "document_id"],
                                include=("client", "tf", "doc_length"),
                                name="posting_user_term",
                            ),
                            models.Index(
                                fields=["organization", "kind", "lexeme"],
                                include=("client", "end_user", "document_id", "tf", "doc_length"),
                                name="posting_org_term",
                            ),
                            models.Index(fields=["kind", "document_id"], name="posting_document"),
                            models.Index(fields=["client"], name="posting_client"),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="RetrievalLog",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("endpoint", models.CharField(max_length=64)),
                        ("query", models.TextField(blank=True)),
                        ("method", models.CharField(max_length=16)),
                        ("kinds", models.JSONField(default=list)),
                        ("results", models.JSONField(default=list)),
                        ("gate", models.JSONField(default=dict)),
                        ("latency_ms", models.FloatField()),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        (
                            "client",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.client",
                            ),
                        ),
                        (
                            "end_user",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.enduser",
                            ),
                        ),
                        (
                            "organization",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.organization",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "memory_retrievallog",
                        "ordering": ["-created_at", "-id"],
                        "indexes": [
                            models.Index(
                                fields=["organization", "client", "-created_at"],
                                name="retrieval_log_client",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="TermStats",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("kind", models.PositiveSmallIntegerField()),
                        ("lexeme", models.TextField()),
                        ("doc_frequency", models.IntegerField(default=0)),
                        ("max_tf", models.IntegerField(default=0)),
                        (
                            "client",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.client",
                            ),
                        ),
                        (
                            "end_user",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.enduser",
                            ),
                        ),
                        (
                            "organization",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="accounts.organization",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "memory_termstats",
                        "indexes": [
                            models.Index(
                                fields=["organization", "kind", "lexeme"], name="term_stats_org"
                            ),
                            models.Index(fields=["client"], name="term_stats_client"),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("end_user", "client", "kind", "lexeme"),
                                name="term_stats_unique",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_follow, content_types_return),
    ]
