"""Databases of a test's own on the test server: migrated by manage.py in a child process."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.support.processes import ROOT, child_env


def admin_connection(dbname: str = "postgres") -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        dbname=dbname,
        autocommit=True,
    )


def manage(database_url: str, *args: str) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=child_env(
            DATABASE_URL=database_url,
            SECRET_KEY=settings.SECRET_KEY,
            SEALING_KEYS=settings.SEALING_KEYS,
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def throwaway_database(db):
    """A database of its own on the test server (named after the test database), dropped
    after the test."""
    name = f"{connection.settings_dict['NAME']}_convert"[:63]
    with admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name, url_of(name)
    with admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def url_of(name: str) -> str:
    """The URL of database `name` on the test server, with the test database's credentials."""
    db = connection.settings_dict
    auth = db.get("USER") or ""
    auth += f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    return f"postgres://{auth}{'@' if auth else ''}{host}/{name}"


def run_on_sqlite(script: str, tmp_path) -> dict:
    """Run `script` (Python that sets Django up itself) in a child process on an embedded
    SQLite database of its own; return the JSON of its last printed line."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=child_env(
            DJANGO_SETTINGS_MODULE="config.settings",
            DATABASE_URL=f"sqlite:///{tmp_path / 'embedded.sqlite3'}",
            SECRET_KEY="sqlite-test-secret-key-not-for-production-use",
            SEALING_KEYS=settings.SEALING_KEYS,
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
