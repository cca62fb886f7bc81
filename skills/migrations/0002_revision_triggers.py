"""PostgreSQL triggers that make skill revision numbers gap-free and rows immutable.

The unique constraint stops duplicate numbers; only a trigger can say that
number n needs number n-1 of the same skill. Deleting a whole skill (which
cascades to its revisions) stays possible. On SQLite (the embedded default)
the model and `skills.services` keep the rule.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION toolsync_skillrevision_gap_free() RETURNS trigger AS $$
BEGIN
    IF NEW.number <> 1 AND NOT EXISTS (
        SELECT 1 FROM skills_skillrevision
        WHERE skill_id = NEW.skill_id AND number = NEW.number - 1
    ) THEN
        RAISE EXCEPTION 'skill % revision % has no revision % before it',
            NEW.skill_id, NEW.number, NEW.number - 1
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION toolsync_skillrevision_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'skill revisions are immutable' USING ERRCODE = 'check_violation';
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER skillrevision_gap_free BEFORE INSERT ON skills_skillrevision
    FOR EACH ROW EXECUTE FUNCTION toolsync_skillrevision_gap_free();
CREATE TRIGGER skillrevision_immutable BEFORE UPDATE ON skills_skillrevision
    FOR EACH ROW EXECUTE FUNCTION toolsync_skillrevision_immutable();
CREATE TRIGGER skillreference_immutable BEFORE UPDATE ON skills_skillreference
    FOR EACH ROW EXECUTE FUNCTION toolsync_skillrevision_immutable();
"""

DROP = """
DROP TRIGGER IF EXISTS skillrevision_gap_free ON skills_skillrevision;
DROP TRIGGER IF EXISTS skillrevision_immutable ON skills_skillrevision;
DROP TRIGGER IF EXISTS skillreference_immutable ON skills_skillreference;
DROP FUNCTION IF EXISTS toolsync_skillrevision_gap_free();
DROP FUNCTION IF EXISTS toolsync_skillrevision_immutable();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("skills", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
