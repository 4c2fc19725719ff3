"""A DatabaseTable in MariaDB: admission checks, and the table made to match.

Admission (validate, validate_change), without the database: lower-case
identifiers (`[a-z_][a-z0-9_]*`, at most 63 characters), at least one column,
no duplicate, a known agnostic type; `serverName` a Service name; `name` and
`serverName` fixed once created; the storage engine of the table's
MariaDbDatabaseTable reference one MariaDB has (InnoDB, Aria, MyISAM, MEMORY),
and no `text` column in a MEMORY table (MariaDB cannot store one). Each error
names its field path, e.g. spec.columns[1].type.

The agnostic types, in MariaDB's words (dbt-spec.md):

  int32 INT, int64 BIGINT, uint64 BIGINT UNSIGNED, string VARCHAR(255),
  text TEXT, bool BOOLEAN, timestamp DATETIME(6), float64 DOUBLE

Sync (sync): what the spec asks is compared with what the database has in
MariaDB's own words: the wanted columns are created in a temporary table
first, so `BOOLEAN` and `tinyint(1)` compare equal. Then the table is
created (`ENGINE=<storageEngine>`), or altered in ONE `ALTER TABLE` (MariaDB
commits each DDL statement on its own: one statement applies whole or not at
all): missing columns added in the spec's order, types and nullability
modified, the engine changed, columns the spec does not list dropped only
when `dropExtraColumns` is true. The engine is then read back from
information_schema.TABLES (what is reported). On deletion, the table is
dropped only when `deletionPolicy` is `Delete`.
"""

import re
import time
from dataclasses import asdict, dataclass, field

import pymysql

KIND = "MariaDbDatabaseTable"
GROUP = "example.cnpgi.io"
REFERENCES_KEY = "cnpgi.io/references"

TYPES = {
    "int32": "INT",
    "int64": "BIGINT",
    "uint64": "BIGINT UNSIGNED",
    "string": "VARCHAR(255)",
    "text": "TEXT",
    "bool": "BOOLEAN",
    "timestamp": "DATETIME(6)",
    "float64": "DOUBLE",
}
ENGINES = ("InnoDB", "Aria", "MyISAM", "MEMORY")
DEFAULT_ENGINE = "InnoDB"
DELETION_POLICIES = ("Keep", "Delete")
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
MAX_IDENTIFIER = 63
# A Service name (DNS-1035 label).
SERVICE_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MAX_SERVICE_NAME = 63

# Deadlines, in seconds, of each step of a sync (never more than what is left of the call's).
CONNECT_TIMEOUT = 5.0
STATEMENT_TIMEOUT = 20.0
PORT = 3306


def _path(*components):
    return [str(c) for c in components]


def error(path, value, message):
    """A validation error: (path components, value, message)."""
    return (path, "" if value is None else str(value), message)


def _identifier(name):
    if not isinstance(name, str) or not name:
        return "required"
    if len(name) > MAX_IDENTIFIER:
        return f"longer than {MAX_IDENTIFIER} characters"
    if not IDENTIFIER.fullmatch(name):
        return "must be a lower-case identifier: a-z, 0-9 and _, not starting with a digit"
    return None


def spec_of(table):
    spec = table.get("spec") if isinstance(table, dict) else None
    return spec if isinstance(spec, dict) else {}


def columns_of(spec):
    columns = spec.get("columns")
    return [c if isinstance(c, dict) else {} for c in columns] if isinstance(columns, list) else []


@dataclass(frozen=True)
class Settings:
    """What this table's MariaDbDatabaseTable reference says (defaults without one)."""

    engine: str = DEFAULT_ENGINE
    reference: dict | None = None  # {apiVersion, kind, name, field}: where to report


def _field_path(field_name):
    """`spec.references[0]` -> ["spec", "references", "0"]."""
    return [part for part in re.split(r"[.\[\]]+", field_name or "") if part] or ["spec", "references"]


def _canonical_engine(engine):
    return next((known for known in ENGINES if isinstance(engine, str) and known.lower() == engine.lower()), None)


def my_references(table):
    """The references of this plugin's kind the resource carries (cnpgi.io/references)."""
    references = table.get(REFERENCES_KEY) if isinstance(table, dict) else None
    if not isinstance(references, list):
        return []
    return [r for r in references if isinstance(r, dict) and r.get("kind") == KIND and str(r.get("apiVersion", "")).split("/")[0] == GROUP]


def reference_errors(table):
    """Admission errors of the MariaDbDatabaseTable reference (a missing one is the host's condition, not an error)."""
    errors = []
    references = my_references(table)
    for extra in references[1:]:
        errors.append(error(_field_path(extra.get("field")), extra.get("name"), f"a table takes one {KIND} reference: remove this one"))
    if not references:
        return errors
    reference = references[0]
    obj = reference.get("object")
    if not isinstance(obj, dict):
        return errors
    engine = spec_of(obj).get("storageEngine")
    if engine is not None and _canonical_engine(engine) is None:
        errors.append(
            error(
                _field_path(reference.get("field")),
                engine,
                f"{KIND} {reference.get('name')}: spec.storageEngine {engine!r} is not one of {', '.join(ENGINES)}",
            )
        )
    elif _canonical_engine(engine) == "MEMORY":
        for index, column in enumerate(columns_of(spec_of(table))):
            if column.get("type") == "text":
                errors.append(
                    error(
                        _path("spec", "columns", index, "type"),
                        "text",
                        f"{KIND} {reference.get('name')} asks for the MEMORY engine, which cannot store text: use string or another engine",
                    )
                )
    return errors


def settings(table):
    """The Settings of a table to sync; ValueError when its reference cannot be used."""
    references = my_references(table)
    if not references:
        return Settings()
    reference = references[0]
    where = f"{KIND} {reference.get('name')} ({reference.get('field')})"
    obj = reference.get("object")
    if not isinstance(obj, dict):
        why = reference.get("error") or "the operator sent no object"
        raise ValueError(f"{where} could not be read: {why}: create it, or remove the reference")
    wanted = spec_of(obj).get("storageEngine") or DEFAULT_ENGINE
    engine = _canonical_engine(wanted)
    if engine is None:
        raise ValueError(f"{where}: spec.storageEngine {wanted!r} is not one of {', '.join(ENGINES)}")
    report_to = {k: reference.get(k) for k in ("apiVersion", "kind", "name")}
    return Settings(engine=engine, reference=report_to)


def validate(table):
    """Every admission error of a new DatabaseTable."""
    spec = spec_of(table)
    errors = []
    why = _identifier(spec.get("name"))
    if why:
        errors.append(error(_path("spec", "name"), spec.get("name"), why))
    server = spec.get("serverName")
    if not isinstance(server, str) or not server:
        errors.append(error(_path("spec", "serverName"), server, "required: the name of the MariaDB Service"))
    elif len(server) > MAX_SERVICE_NAME or not SERVICE_NAME.fullmatch(server):
        errors.append(error(_path("spec", "serverName"), server, "must be a Service name: a-z, 0-9 and -, starting with a letter"))
    columns = columns_of(spec)
    if not columns:
        errors.append(error(_path("spec", "columns"), "", "a table needs at least one column"))
    seen = set()
    for index, column in enumerate(columns):
        name = column.get("name")
        why = _identifier(name)
        if why:
            errors.append(error(_path("spec", "columns", index, "name"), name, why))
        elif name in seen:
            errors.append(error(_path("spec", "columns", index, "name"), name, "another column has this name"))
        seen.add(name)
        kind = column.get("type")
        if kind not in TYPES:
            errors.append(error(_path("spec", "columns", index, "type"), kind, f"unknown type: one of {', '.join(TYPES)}"))
    policy = spec.get("deletionPolicy")
    if policy is not None and policy not in DELETION_POLICIES:
        errors.append(error(_path("spec", "deletionPolicy"), policy, f"one of {', '.join(DELETION_POLICIES)}"))
    return errors + reference_errors(table)


def validate_change(old, new):
    """Every admission error of a change: the new table's, and the fields fixed once created."""
    errors = validate(new)
    for key, what in (("name", "the table would be left behind"), ("serverName", "the table would be left on the old server")):
        before, after = spec_of(old).get(key), spec_of(new).get(key)
        if before != after:
            errors.append(error(_path("spec", key), after, f"cannot be changed (was {before!r}): {what}; create another DatabaseTable"))
    return errors


class SyncError(Exception):
    """A sync failed. `kind`: invalid (the spec), unavailable (the server), precondition (a missing reference), refused (MariaDB said no)."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


@dataclass
class Report:
    """What a sync found and did: the table's status."""

    table: str
    server: str
    engine: str | None = None
    columns: list = field(default_factory=list)
    applied: list = field(default_factory=list)
    generation: int = 0
    deleted: bool = False
    # Where to report on the MariaDbDatabaseTable ({apiVersion, kind, name}); not part of the status.
    reference: dict | None = None

    def as_status(self):
        status = asdict(self)
        del status["reference"]
        if status["engine"] is None:
            del status["engine"]
        if not status["deleted"]:
            del status["deleted"]
        return status


def quote(identifier):
    return "`" + identifier.replace("`", "``") + "`"


def definition(column):
    not_null = "" if column.get("nullable") else " NOT NULL"
    return f"{quote(column['name'])} {TYPES[column['type']]}{not_null}"


@dataclass(frozen=True)
class Existing:
    """A column as MariaDB describes it (SHOW COLUMNS)."""

    name: str
    column_type: str
    not_null: bool

    def __str__(self):
        return f"{quote(self.name)} {self.column_type}{' NOT NULL' if self.not_null else ''}"


def alterations(spec_columns, wanted, existing, engine, current_engine, drop_extra):
    """The clauses of the ALTER TABLE that turns `existing` into `wanted` (none: it matches)."""
    by_name = {column.name: column for column in existing}
    clauses = []
    for index, (column, want) in enumerate(zip(spec_columns, wanted, strict=True)):
        have = by_name.get(want.name)
        if have is None:
            where = "FIRST" if index == 0 else f"AFTER {quote(spec_columns[index - 1]['name'])}"
            clauses.append(f"ADD COLUMN {definition(column)} {where}")
        elif (have.column_type, have.not_null) != (want.column_type, want.not_null):
            clauses.append(f"MODIFY COLUMN {definition(column)}")
    if drop_extra:
        names = {want.name for want in wanted}
        clauses += [f"DROP COLUMN {quote(column.name)}" for column in existing if column.name not in names]
    if (current_engine or "").lower() != engine.lower():
        clauses.append(f"ENGINE={engine}")
    return clauses


class Session:
    """One connection, each statement bounded by what is left of the deadline."""

    def __init__(self, host, port, credentials, deadline):
        self.deadline = deadline
        self.where = f"MariaDB at {host}:{port}/{credentials.dbname}"
        try:
            self.connection = pymysql.connect(
                host=host,
                port=port,
                user=credentials.username,
                password=credentials.password,
                database=credentials.dbname,
                connect_timeout=max(1, min(CONNECT_TIMEOUT, self.left())),
                read_timeout=max(1, min(STATEMENT_TIMEOUT, self.left())),
                write_timeout=max(1, min(STATEMENT_TIMEOUT, self.left())),
                autocommit=True,
                charset="utf8mb4",
            )
        except pymysql.MySQLError as error:
            raise self.failed(error, "connecting") from error

    def left(self):
        return self.deadline - time.monotonic()

    def failed(self, error, doing):
        code = error.args[0] if error.args else None
        message = error.args[1] if len(error.args) > 1 else str(error)
        if code == 1045:
            return SyncError("refused", f"{self.where} refused the credentials ({message}): check the server's Secret <serverName>-app")
        if isinstance(error, pymysql.OperationalError) and code in (2003, 2006, 2013, 2055):
            return SyncError("unavailable", f"{self.where} could not be reached {doing} ({code}: {message}): is the server up and its Service right?")
        return SyncError("refused", f"{self.where} failed {doing}: {code}: {message}")

    def run(self, statement, args=None):
        if self.left() <= 0:
            raise SyncError("unavailable", f"{self.where}: the call's deadline passed before {statement.split(' (')[0]!r}: try again")
        try:
            with self.connection.cursor() as cursor:
                cursor.execute(statement, args)
                return cursor.fetchall()
        except pymysql.MySQLError as error:
            raise self.failed(error, f"running {statement!r}") from error

    def close(self):
        self.connection.close()

    def columns(self, table):
        return [Existing(name=row[0], column_type=row[1], not_null=row[2] == "NO") for row in self.run(f"SHOW COLUMNS FROM {table}")]

    def engine(self, name):
        """The table's engine as information_schema.TABLES says; None when there is no such table."""
        rows = self.run("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (name,))
        return rows[0][0] if rows else None


def connect(host, port, credentials, deadline):
    session = Session(host, port, credentials, deadline)
    # Refuse rather than adapt: an unknown engine is an error (not InnoDB
    # instead), a value that does not fit is an error (not truncated).
    session.run("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO'")
    return session


def sync(table, credentials, host, port, deadline):
    """Makes the table exist as `table` (a DatabaseTable, as JSON) says; the Report."""
    errors = validate(table)
    if errors:
        raise SyncError("invalid", "the spec is invalid (the admission webhook was bypassed?): " + "; ".join(describe(e) for e in errors))
    try:
        wanted_settings = settings(table)
    except ValueError as error:
        raise SyncError("precondition", str(error)) from error
    spec = spec_of(table)
    name, columns = spec["name"], columns_of(spec)
    report = Report(table=f"{credentials.dbname}.{name}", server=f"{host}:{port}", generation=(table.get("metadata") or {}).get("generation") or 0)
    report.reference = wanted_settings.reference
    session = connect(host, port, credentials, deadline)
    try:
        definitions = ", ".join(definition(column) for column in columns)
        session.run("DROP TEMPORARY TABLE IF EXISTS cnpgi_wanted")
        session.run(f"CREATE TEMPORARY TABLE cnpgi_wanted ({definitions})")
        wanted = session.columns("cnpgi_wanted")
        session.run("DROP TEMPORARY TABLE cnpgi_wanted")
        current_engine = session.engine(name)
        engine = wanted_settings.engine
        if current_engine is None:
            report.applied = [f"CREATE TABLE {quote(name)} ({definitions}) ENGINE={engine}"]
        else:
            existing = session.columns(quote(name))
            clauses = alterations(columns, wanted, existing, engine, current_engine, bool(spec.get("dropExtraColumns")))
            report.applied = [f"ALTER TABLE {quote(name)} {', '.join(clauses)}"] if clauses else []
        for statement in report.applied:
            session.run(statement)
        report.columns = [str(column) for column in session.columns(quote(name))]
        report.engine = session.engine(name)
        if (report.engine or "").lower() != engine.lower():
            raise SyncError("refused", f"{session.where}: table {name} has engine {report.engine}, not {engine} as asked: does the server have {engine}?")
    finally:
        session.close()
    return report


def drop(table, credentials, host, port, deadline):
    """DROP TABLE (on deletion, when deletionPolicy is Delete); the Report."""
    spec = spec_of(table)
    name = spec.get("name")
    report = Report(table=f"{credentials.dbname}.{name}", server=f"{host}:{port}", deleted=True)
    if _identifier(name):
        raise SyncError("invalid", f"spec.name {name!r} is not a table name: nothing dropped")
    session = connect(host, port, credentials, deadline)
    try:
        report.applied = [f"DROP TABLE IF EXISTS {quote(name)}"]
        session.run(report.applied[0])
    finally:
        session.close()
    return report


def field_path(path):
    """["spec", "columns", "1", "type"] -> spec.columns[1].type."""
    return "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in path).lstrip(".")


def describe(e):
    path, value, message = e
    return f"{field_path(path)} {value!r}: {message}"
