# The retrieval engine's tables serve every searchable kind, not memories only: the postings
# table and the statistics name a kind (its code) and a document (a row of that kind), the
# retrieval log the kinds it searched, and a gate calibration may be one kind's own.
#
# Columns are renamed in place (PostgreSQL renames them inside their indexes and constraints:
# no index is rebuilt); the model state is told the same through the index and constraint
# definitions, which name the fields.

from django.db import migrations, models


def _renamed(table, renames, state_operations):
    sql = "; ".join(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}" for old, new in renames)
    reverse = "; ".join(f"ALTER TABLE {table} RENAME COLUMN {new} TO {old}" for old, new in renames)
    return migrations.SeparateDatabaseAndState(
        database_operations=[migrations.RunSQL(sql, reverse)],
        state_operations=state_operations,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_end_user_list_index"),
        ("memory", "0005_drop_search_vector"),
    ]

    operations = [
        migrations.RenameModel(old_name="MemoryPosting", new_name="Posting"),
        migrations.RenameIndex(
            model_name="posting", new_name="posting_document", old_name="posting_memory"
        ),
        _renamed(
            "memory_posting",
            [("memory_type", "kind"), ("memory_id", "document_id")],
            [
                migrations.RemoveIndex(model_name="posting", name="posting_user_term"),
                migrations.RemoveIndex(model_name="posting", name="posting_org_term"),
                migrations.RemoveIndex(model_name="posting", name="posting_document"),
                migrations.RenameField(
                    model_name="posting", old_name="memory_type", new_name="kind"
                ),
                migrations.RenameField(
                    model_name="posting", old_name="memory_id", new_name="document_id"
                ),
                migrations.AddIndex(
                    model_name="posting",
                    index=models.Index(
                        fields=["end_user", "kind", "lexeme", "document_id"],
                        include=("client", "tf", "doc_length"),
                        name="posting_user_term",
                    ),
                ),
                migrations.AddIndex(
                    model_name="posting",
                    index=models.Index(
                        fields=["organization", "kind", "lexeme"],
                        include=("client", "end_user", "document_id", "tf", "doc_length"),
                        name="posting_org_term",
                    ),
                ),
                migrations.AddIndex(
                    model_name="posting",
                    index=models.Index(fields=["kind", "document_id"], name="posting_document"),
                ),
            ],
        ),
        _renamed(
            "memory_termstats",
            [("memory_type", "kind")],
            [
                migrations.RemoveConstraint(model_name="termstats", name="term_stats_unique"),
                migrations.RemoveIndex(model_name="termstats", name="term_stats_org"),
                migrations.RenameField(
                    model_name="termstats", old_name="memory_type", new_name="kind"
                ),
                migrations.AddConstraint(
                    model_name="termstats",
                    constraint=models.UniqueConstraint(
                        fields=("end_user", "client", "kind", "lexeme"), name="term_stats_unique"
                    ),
                ),
                migrations.AddIndex(
                    model_name="termstats",
                    index=models.Index(
                        fields=["organization", "kind", "lexeme"], name="term_stats_org"
                    ),
                ),
            ],
        ),
        _renamed(
            "memory_documentstats",
            [("memory_type", "kind")],
            [
                migrations.RemoveConstraint(
                    model_name="documentstats", name="document_stats_unique"
                ),
                migrations.RemoveIndex(model_name="documentstats", name="document_stats_org"),
                migrations.RenameField(
                    model_name="documentstats", old_name="memory_type", new_name="kind"
                ),
                migrations.AddConstraint(
                    model_name="documentstats",
                    constraint=models.UniqueConstraint(
                        fields=("end_user", "client", "kind"), name="document_stats_unique"
                    ),
                ),
                migrations.AddIndex(
                    model_name="documentstats",
                    index=models.Index(fields=["organization", "kind"], name="document_stats_org"),
                ),
            ],
        ),
        migrations.RenameField(
            model_name="retrievallog", old_name="memory_types", new_name="kinds"
        ),
        migrations.AlterField(
            model_name="gatecalibration",
            name="model",
            field=models.CharField(max_length=100),
        ),
        migrations.AddField(
            model_name="gatecalibration",
            name="kind",
            field=models.CharField(
                blank=True,
                default="",
                help_text="A searchable kind's name; blank: every kind.",
                max_length=64,
            ),
        ),
        migrations.AddConstraint(
            model_name="gatecalibration",
            constraint=models.UniqueConstraint(
                fields=("model", "kind"), name="gate_calibration_unique"
            ),
        ),
    ]
