"""PostgreSQL triggers that make revision numbering gap-free and rows immutable.

A unique constraint stops duplicate numbers; only a trigger can say that
number n needs number n-1 of the same tool to exist. Rows inserted earlier in
the same statement are visible to a BEFORE ROW trigger, so a bulk insert of
consecutive numbers passes. On SQLite (the embedded default) the model and
`tools.services` keep the rule.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION toolsync_revision_gap_free() RETURNS trigger AS $$
BEGIN
    IF NEW.number <> 1 AND NOT EXISTS (
        SELECT 1 FROM tools_toolrevision
        WHERE tool_id = NEW.tool_id AND number = NEW.number - 1
    ) THEN
        RAISE EXCEPTION 'tool % revision % has no revision % before it',
            NEW.tool_id, NEW.number, NEW.number - 1
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION toolsync_revision_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'tool revisions are immutable' USING ERRCODE = 'check_violation';
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER toolrevision_gap_free BEFORE INSERT ON tools_toolrevision
    FOR EACH ROW EXECUTE FUNCTION toolsync_revision_gap_free();
CREATE TRIGGER toolrevision_immutable BEFORE UPDATE ON tools_toolrevision
    FOR EACH ROW EXECUTE FUNCTION toolsync_revision_immutable();
"""

DROP = """
DROP TRIGGER IF EXISTS toolrevision_gap_free ON tools_toolrevision;
DROP TRIGGER IF EXISTS toolrevision_immutable ON tools_toolrevision;
DROP FUNCTION IF EXISTS toolsync_revision_gap_free();
DROP FUNCTION IF EXISTS toolsync_revision_immutable();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("tools", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
