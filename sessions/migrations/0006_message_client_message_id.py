"""A turn's id in its client's own system, unique per client and user where given. The unique
index is built concurrently: the turns' table is the largest, and adds must not wait on it."""

from django.db import migrations, models

INDEX = "message_client_message_id_unique"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("accounts", "0005_add_user_imports"),
        ("conversations", "0005_session_stated_outcome"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="client_message_id",
            field=models.CharField(
                blank=True,
                default="",
                help_text="The turn's id in the client's own system: a turn sent again with it "
                "is stored once.",
                max_length=255,
            ),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "{INDEX}" ON '
                    '"conversations_message" ("client_id", "end_user_id", "client_message_id") '
                    "WHERE NOT (\"client_message_id\" = '')",
                    reverse_sql=f'DROP INDEX CONCURRENTLY IF EXISTS "{INDEX}"',
                )
            ],
            state_operations=[
                migrations.AddConstraint(
                    model_name="message",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("client_message_id", ""), _negated=True),
                        fields=("client", "end_user", "client_message_id"),
                        name=INDEX,
                    ),
                ),
            ],
        ),
    ]
