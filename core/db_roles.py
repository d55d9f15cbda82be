"""Two database roles: the owner, who migrates, and the application's, which serves.

The proof Tollgate sells (the audit trail, receipts, their signed heads, the receipt archives'
manifests, the wallet ledger) must hold against whoever holds the application's own database
login. A table's owner may disable its triggers, truncate it or drop it, so the role every
serving process connects with (DATABASE_URL: the gateway, the control plane, the workers)
owns none of the proof tables and may only INSERT and SELECT on them. Everything else it
owns: its monthly partitions are made and dropped at run time (core/partitions.py), which
PostgreSQL allows only a table's owner. Archived receipts leave through one function run
with the owner's rights (APP_FUNCTIONS).

`grant_app_role` is run by the owner after every `migrate` (compose's migrate service, the
Procfile's documented steps): it creates the application's role if it is missing (with
DATABASE_URL's password), hands it every table that is not proof, and takes back all it
may do on the proof tables but INSERT and SELECT. `owner_problems` is the deploy check's
question: can the role this process runs as rewrite the proof?
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

# The proof: append-only for the application (audit/models.py, billing/models.py).
PROOF_TABLES = (
    "audit_auditentry",
    "audit_signedhead",
    "billing_receipt",
    "billing_ledgerentry",
    "billing_receiptarchive",
)
# What the application may run with the owner's rights: removing receipts an archive
# covers (billing/archives.py; billing migration 0013 creates it, revoked from PUBLIC).
APP_FUNCTIONS = ("tollgate_drop_archived_receipts(bigint, bigint)",)
# What the application may never do on a proof table (TRUNCATE, REFERENCES and TRIGGER
# included: a trigger of its own could rewrite rows as they are inserted).
REVOKED = ("UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")


@dataclass(frozen=True)
class Granted:
    role: str
    created: bool
    handed_over: int  # tables (and partitions) the role now owns
    proof: tuple[str, ...]  # proof tables it may only insert into and read


def grant_app_role(cursor, *, role: str, password: str | None) -> Granted:
    """As the owner, set up `role` as the application's: create it (LOGIN, `password`) if
    missing, else set its password; hand it every other table (and partition: their id
    sequences follow them) of the public schema; let it only INSERT and SELECT on the proof
    tables. Idempotent."""
    cursor.execute("SELECT current_user, current_database()")
    owner, database = cursor.fetchone()
    if role == owner:
        raise ValueError(
            f"DATABASE_URL's role {role!r} is the owner's: the application would own its proof."
            " Give the application a role of its own (docs/production.md)."
        )
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
    created = cursor.fetchone() is None
    name = sql.Identifier(role)
    login = sql.SQL("LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS")
    if created:
        cursor.execute(sql.SQL("CREATE ROLE {} {}").format(name, login))
    if password:
        cursor.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(name, sql.Literal(password)))
    cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    if not cursor.fetchone()[0]:
        # Handing a table to a role takes membership of it; later migrations alter them.
        cursor.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(name))
    cursor.execute(
        sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
            sql.Identifier(database), name
        )
    )
    cursor.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA public TO {}").format(name))
    cursor.execute(
        "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')"
        " ORDER BY c.relname"
    )
    tables = cursor.fetchall()
    handed = 0
    for table, _kind in tables:
        if table in PROOF_TABLES:
            continue
        cursor.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(sql.Identifier(table), name))
        handed += 1
    proof = tuple(t for t, _ in tables if t in PROOF_TABLES)
    for table in proof:
        ident = sql.Identifier(table)
        cursor.execute(sql.SQL("ALTER TABLE {} OWNER TO CURRENT_USER").format(ident))
        cursor.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(ident, name))
        cursor.execute(sql.SQL("REVOKE ALL ON {} FROM PUBLIC").format(ident))
        cursor.execute(sql.SQL("GRANT SELECT, INSERT ON {} TO {}").format(ident, name))
        # Its id sequence: the next id, never a reset (setval needs UPDATE).
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        sequence = cursor.fetchone()[0]
        if sequence:
            cursor.execute(
                sql.SQL("GRANT USAGE, SELECT ON SEQUENCE {} TO {}").format(sql.SQL(sequence), name)
            )
    for function in APP_FUNCTIONS:
        cursor.execute("SELECT to_regprocedure(%s)", [function])
        if cursor.fetchone()[0] is not None:  # absent before its migration ran
            cursor.execute(
                sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(sql.SQL(function), name)
            )
    return Granted(role=role, created=created, handed_over=handed, proof=proof)


def owner_problems(cursor) -> list[str]:
    """What the role this connection runs as may do to the proof tables that it must not:
    own one (or be a member of its owner, or a superuser), or UPDATE, DELETE, TRUNCATE it."""
    cursor.execute(
        "SELECT c.relname, pg_get_userbyid(c.relowner),"
        " pg_has_role(current_user, c.relowner, 'USAGE'),"
        " has_table_privilege(current_user, c.oid, 'UPDATE'),"
        " has_table_privilege(current_user, c.oid, 'DELETE'),"
        " has_table_privilege(current_user, c.oid, 'TRUNCATE')"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relname = ANY(%s) ORDER BY c.relname",
        [list(PROOF_TABLES)],
    )
    problems = []
    for table, owner, owns, *rights in cursor.fetchall():
        if owns:
            problems.append(f"{table} is owned by {owner}, whose rights this role has")
            continue
        named = zip(("UPDATE", "DELETE", "TRUNCATE"), rights, strict=True)
        allowed = [what for what, right in named if right]
        if allowed:
            problems.append(f"this role may {', '.join(allowed)} {table}")
    return problems
