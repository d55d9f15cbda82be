"""The embedded database (SQLite, `make run`) lets two writers wait for each other instead of
failing one: a transaction that reads and then writes while another connection commits a
write must not answer "database is locked" (which the tenant API turns into LM-5004)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.checkouts import make_env

# Two threads, each with its own Django connection to the embedded database. The first opens a
# transaction and reads; the second then writes and commits; the first then writes. In
# SQLite's default (deferred) mode the first write fails at once: its read snapshot is stale.
RACE = textwrap.dedent(
    """
    import threading
    import django
    django.setup()
    from django.db import connection, transaction

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE rows (who TEXT)")

    first_has_read = threading.Event()
    second_wrote = threading.Event()
    failures = []

    def first():
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM rows")
                first_has_read.set()
                # Bounded: in immediate mode the second writer is waiting on us instead.
                second_wrote.wait(timeout=1)
                cursor.execute("INSERT INTO rows VALUES ('first')")
        except Exception as exc:
            failures.append(f"first: {exc}")
        finally:
            connection.close()

    def second():
        first_has_read.wait()
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("INSERT INTO rows VALUES ('second')")
        except Exception as exc:
            failures.append(f"second: {exc}")
        finally:
            second_wrote.set()
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with connection.cursor() as cursor:
        cursor.execute("SELECT who FROM rows ORDER BY who")
        print(failures, [row[0] for row in cursor.fetchall()])
    """
)


def test_a_read_then_write_transaction_waits_for_a_concurrent_writer(tmp_path: Path):
    env = make_env(TOLLGATE_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="config.settings")
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", RACE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] ['first', 'second']"
