"""Environment defaults for the test run, loaded as a plugin (-p) before Django starts.

CI and `make test` pass DATABASE_URL (PostgreSQL) and TOOLSYNC_REQUIRE_POSTGRES;
without them the suite runs on SQLite and PostgreSQL-only tests skip.
"""

import os

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production")
# A fixed Fernet key for tests only (never used outside the test run).
os.environ.setdefault(
    "TOOLSYNC_ENCRYPTION_KEY", "uE7o9lqjR0h1a1Y1bVb1Yq7wqgYx8m6b2Y0z8s3Yw1E="
)
os.environ.setdefault("TOOLSYNC_ALLOW_PASSWORDLESS_DB", "1")
os.environ.setdefault(
    "TOOLSYNC_VAR_DIR",
    os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test"),
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
