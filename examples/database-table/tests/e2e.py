#!/usr/bin/env python3
"""The checks of the DatabaseTable e2e test, run by e2e.sh (see there) in phases:

  setup             the Kubernetes objects users would apply: the namespace, the
                    server's credentials Secret (app-db-app, as CloudNativePG
                    names it), the three CRDs, the webhook configurations, the
                    RBAC of manifests/;
  main              discovery; the seed's table preferring the absent MariaDB
                    implementation: PostgreSQL chosen (status and Event say
                    why); its references (hash partitions in PostgreSQL, the
                    partition report in the PostgreSqlDatabaseTable's status
                    and on /metrics); column changes; refusals with field
                    paths; a partitionBy change keeping the rows; a missing
                    reference; deletion with policy Delete (table dropped,
                    finalizer gone) and Keep (table stays);
  plugin-stopped    e2e.sh stopped postgres.tables.example.cnpgi.io: the status
                    says no implementation is ready; a deleted table's cleanup
                    is abandoned at the deadline (never forever);
  plugin-restarted  e2e.sh started it again: Ready again, and it works.

Prints one line per check (tests/lib/checks.py) and appends it to --results.
The API server and its admin credentials come from E2E_SERVER, E2E_CA,
E2E_CERT and E2E_KEY (tests/lib/kube.py); PostgreSQL is queried through the
psql wrapper e2e.sh wrote in --workdir. Waits poll until a deadline.
"""

import argparse
import base64
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from checks import Checks  # noqa: E402 (tests/lib is found through ROOT)
from kube import RESOURCES, ApiError, Kube, load_yaml_documents, resource_path  # noqa: E402
from waits import Failure, wait_for  # noqa: E402

NAMESPACE = "tables"
SYSTEM_NAMESPACE = "database-table-system"
SERVER = "app-db"
SECRET = f"{SERVER}-app"
POSTGRES = "postgres.tables.example.cnpgi.io"
MARIADB = "mariadb.tables.example.cnpgi.io"
NAMING = "naming.tables.example.cnpgi.io"
KIND = "tables.example.cnpgi.io"
API = "example.cnpgi.io/v1"
WEBHOOK = "database-table-operator"
FINALIZER = "cnpgi.io/plugins"
RESERVED_MESSAGE = '"user" is a reserved word in SQL: choose another name'
ROWS = 20

# The example's kinds, for tests/lib/kube.py's paths.
for _kind, _plural in [("PostgreSqlDatabaseTable", "postgresqldatabasetables"), ("MariaDbDatabaseTable", "mariadbdatabasetables")]:
    RESOURCES.setdefault((API, _kind), ("/apis/example.cnpgi.io/v1", _plural, True))


def wait(what, probe, timeout=60):
    """Polls `probe()` -> (done, seen) until done, and returns `seen`; else
    Failure naming what was last seen (waits.wait_for)."""

    def done():
        finished, seen = probe()
        if not finished:
            raise Failure(seen)
        return [seen]

    return wait_for(what, done, timeout, interval=0.5, retry=(subprocess.CalledProcessError,))[0]


def strip_ansi(text):
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


class E2E:
    def __init__(self, args):
        self.args = args
        self.kube = Kube.from_env()
        self.results = open(args.results, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole phase)
        self.checks = Checks(f"DatabaseTable e2e ({args.phase})", record=self.record)
        # Written when the status showed the stopped plugin (read after its restart).
        self.state_file = os.path.join(args.workdir, "plugin-missing-seen")

    def record(self, passed):
        self.results.write(("ok" if passed else "FAIL") + "\n")
        self.results.flush()

    def check(self, name, fn, setup=False):
        return self.checks.check(name, fn, expected=(Failure, ApiError), setup=setup)

    # --- Kubernetes -----------------------------------------------------------------------------

    def path(self, kind, name=None):
        return resource_path(API, kind, NAMESPACE, name)

    def table_path(self, name=None):
        return self.path("DatabaseTable", name)

    def table(self, name):
        return self.kube.get(self.table_path(name))

    def manifest(self, name, columns, references=(), **spec):
        spec = {
            "name": name,
            "serverName": SERVER,
            "preferredImplementation": POSTGRES,
            "columns": columns,
            **({"references": [{"apiVersion": API, "kind": kind, "name": ref} for kind, ref in references]} if references else {}),
            **spec,
        }
        return {"apiVersion": API, "kind": "DatabaseTable", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}

    def pg_table(self, name, partition_by=None):
        spec = {"partitionBy": partition_by} if partition_by else {}
        return {"apiVersion": API, "kind": "PostgreSqlDatabaseTable", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}

    def update_spec(self, name, **spec):
        """A merge patch of the spec (lists are replaced whole); the object as stored."""
        return self.kube.merge_patch(self.table_path(name), {"spec": spec})

    def refused(self, request, field, message=""):
        """`request()` must be refused (by the API server's schema or an admission webhook), naming `field` (and `message`)."""
        try:
            request()
        except ApiError as e:
            text = str(e)
            if e.status >= 500 or field not in text or message not in text:
                raise Failure(f"refused, but not naming {field} {message!r}: {text}") from None
            return text
        raise Failure("admitted")

    def ready(self, name, generation=None, timeout=60):
        """Waits for phase Ready at the current (or given) generation; the object."""

        def probe():
            table = self.table(name)
            status = table.get("status") or {}
            want = generation or table["metadata"]["generation"]
            done = status.get("phase") == "Ready" and status.get("observedGeneration") == want == table["metadata"]["generation"]
            return done, table if done else {"generation": table["metadata"]["generation"], "status": status}

        return wait(f"{name}: phase Ready, observedGeneration = generation", probe, timeout)

    def report(self, name):
        """The PostgreSQL plugin's report in PostgreSqlDatabaseTable `name`'s status."""
        status = self.kube.get(self.path("PostgreSqlDatabaseTable", name)).get("status") or {}
        return (status.get("cnpgiReports") or {}).get(POSTGRES) or {}

    def events(self, name, reason):
        listed = self.kube.get(resource_path("events.k8s.io/v1", "Event", NAMESPACE))
        return [e for e in listed.get("items", []) if e.get("regarding", {}).get("name") == name and e.get("reason") == reason]

    def gone(self, name, timeout):
        def probe():
            found = self.kube.maybe_get(self.table_path(name))
            return found is None, (found or {}).get("metadata", {})

        return wait(f"DatabaseTable {name} gone", probe, timeout)

    # --- PostgreSQL -----------------------------------------------------------------------------

    def sql(self, query):
        psql = [os.path.join(self.args.workdir, "psql"), "-d", "app", "-c", query]
        return subprocess.run(psql, capture_output=True, text=True, check=True, timeout=30).stdout.strip()

    def columns(self, table):
        """{name: (type as format_type writes it, NOT NULL)} of the table in PostgreSQL ({} when absent)."""
        rows = self.sql(
            "SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
            f"WHERE attrelid = to_regclass('public.{table}') AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        )
        return {name: (kind, notnull == "t") for name, kind, notnull in (row.split("|") for row in rows.splitlines() if row)}

    def partitioning(self, table):
        """(strategy h/r or '', [partition names], rows) of the table in PostgreSQL."""
        strategy = self.sql(f"SELECT partstrat FROM pg_partitioned_table WHERE partrelid = to_regclass('public.{table}')")
        names = self.sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            f"WHERE i.inhparent = to_regclass('public.{table}') ORDER BY length(c.relname), c.relname"
        ).split()
        rows = int(self.sql(f"SELECT count(*) FROM public.{table}")) if self.columns(table) else None
        return strategy, names, rows

    def wait_pg(self, what, read, condition, timeout=60):
        def probe():
            seen = read()
            return condition(seen), seen

        return wait(f"PostgreSQL: {what}", probe, timeout)

    def wait_columns(self, table, what, condition):
        return self.wait_pg(f"table {table}: {what}", lambda: self.columns(table), condition)

    # --- the operator's log ---------------------------------------------------------------------

    def operator_log(self):
        with open(os.path.join(self.args.workdir, "logs", "operator.log"), encoding="utf-8", errors="replace") as f:
            return strip_ansi(f.read())

    # ============================================================================================

    def setup(self):
        def namespace_and_secret():
            self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            data = {"username": "app", "password": self.args.pg_password, "dbname": "app"}
            secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE}}
            secret["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
            self.kube.apply(secret)

        def crds():
            definitions = load_yaml_documents(self.args.crd)
            kinds = sorted(d["spec"]["names"]["kind"] for d in definitions)
            if kinds != ["DatabaseTable", "MariaDbDatabaseTable", "PostgreSqlDatabaseTable"]:
                raise Failure(f"--print-crd printed {kinds}")
            for definition in definitions:
                self.kube.apply(definition)
            for definition in definitions:
                path = resource_path("apiextensions.k8s.io/v1", "CustomResourceDefinition", name=definition["metadata"]["name"])

                def established(path=path):
                    conditions = self.kube.get(path).get("status", {}).get("conditions", [])
                    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions), conditions

                wait(f"the CRD {definition['metadata']['name']} Established", established, timeout=30)

        def webhooks():
            with open(self.args.webhook_ca, "rb") as f:
                ca_bundle = base64.b64encode(f.read()).decode()
            for kind, path, name in [
                ("MutatingWebhookConfiguration", "/mutate-databasetable", "mdatabasetable.example.cnpgi.io"),
                ("ValidatingWebhookConfiguration", "/validate-databasetable", "vdatabasetable.example.cnpgi.io"),
            ]:
                rule = {
                    "apiGroups": ["example.cnpgi.io"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["databasetables"],
                    "scope": "Namespaced",
                }
                webhook = {
                    "name": name,
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 15,
                    "clientConfig": {"url": self.args.webhook_url + path, "caBundle": ca_bundle},
                    "rules": [rule],
                    # A table being deleted is let through: removing the finalizer is an update, and must
                    # not need the plugins (they may be why the cleanup was abandoned).
                    "matchConditions": [{"name": "not-being-deleted", "expression": "!has(object.metadata.deletionTimestamp)"}],
                }
                api = "admissionregistration.k8s.io/v1"
                self.kube.apply({"apiVersion": api, "kind": kind, "metadata": {"name": WEBHOOK}, "webhooks": [webhook]})

        def rbac():
            manifests = os.path.join(ROOT, "examples", "database-table", "manifests")
            for file in ["namespace.yaml", "rbac.yaml"]:
                for obj in load_yaml_documents(os.path.join(manifests, file)):
                    self.kube.apply(obj)
            # The tokens the operator and the plugin run with (e2e.sh): exactly what the shipped RBAC grants.
            for sa in ["database-table-operator", "database-table-postgres"]:
                self.kube.token_kubeconfig(SYSTEM_NAMESPACE, sa, os.path.join(self.args.workdir, f"{sa}.kubeconfig"))
            operator = Kube.from_kubeconfig(os.path.join(self.args.workdir, "database-table-operator.kubeconfig"))
            plugin = Kube.from_kubeconfig(os.path.join(self.args.workdir, "database-table-postgres.kubeconfig"))
            group = "example.cnpgi.io"
            expected = [
                (operator, "watch", "databasetables", None, group, True),
                (operator, "patch", "databasetables/status", NAMESPACE, group, True),
                (operator, "patch", "databasetables", NAMESPACE, group, True),  # the finalizer
                (operator, "update", "databasetables", NAMESPACE, group, False),
                (operator, "get", "postgresqldatabasetables", NAMESPACE, group, True),
                (operator, "watch", "mariadbdatabasetables", None, group, True),
                (operator, "patch", "postgresqldatabasetables/status", NAMESPACE, group, True),
                (operator, "patch", "postgresqldatabasetables", NAMESPACE, group, False),
                (operator, "create", "events", NAMESPACE, "events.k8s.io", True),
                (operator, "list", "services", SYSTEM_NAMESPACE, "", True),
                (operator, "get", "secrets", NAMESPACE, "", False),
                (plugin, "get", "secrets", NAMESPACE, "", True),
                (plugin, "list", "secrets", NAMESPACE, "", False),
                (plugin, "list", "databasetables", None, group, False),
            ]
            wrong = [
                f"{'operator' if who is operator else 'plugin'} {verb} {resource} in {ns or 'all namespaces'}: {'refused' if allowed else 'allowed'}"
                for who, verb, resource, ns, group, allowed in expected
                if who.can(verb, resource, ns, group) != allowed
            ]
            if wrong:
                raise Failure("not the shipped RBAC: " + "; ".join(wrong))

        self.check(
            "set-up: manifests/ namespace and RBAC; TokenRequest tokens of the operator's and the plugin's ServiceAccounts, allowed exactly that",
            rbac,
            setup=True,
        )
        self.check(f"set-up: namespace tables and the server's credentials Secret {SECRET} (username, password, dbname)", namespace_and_secret, setup=True)
        self.check("set-up: the three CRDs from database-table-operator --print-crd, Established", crds, setup=True)
        self.check("set-up: Mutating- and ValidatingWebhookConfiguration (https://127.0.0.1, caBundle, failurePolicy Fail)", webhooks, setup=True)

    def main(self):
        def discovery():
            def probe():
                log = self.operator_log()
                done_lines = [line for line in log.splitlines() if "plugin discovery done" in line]
                routable_lines = [line for line in log.splitlines() if "plugin is routable" in line]
                routable = {name for name in (POSTGRES, NAMING) if any(name in line for line in routable_lines)}
                done = bool(done_lines) and all(n in done_lines[0] for n in (POSTGRES, NAMING)) and len(routable) == 2
                return done, f"discovery line: {done_lines[:1]}, routable: {sorted(routable)}"

            wait("the operator logs 'plugin discovery done' naming both plugins, and both routable", probe, timeout=30)

        self.check("discovery: the operator logged 'plugin discovery done' with both plugins, both routable", discovery, setup=True)

        # --- the seed's table: preferring MariaDB, which is not there --------------------------
        def references():
            self.kube.create(self.pg_table("users", {"type": "hash", "column": "id", "partitions": 4}))
            maria = {"apiVersion": API, "kind": "MariaDbDatabaseTable", "metadata": {"name": "users", "namespace": NAMESPACE}, "spec": {}}
            stored = self.kube.create(maria)
            if stored["spec"].get("storageEngine") != "InnoDB":
                raise Failure(f"storageEngine not defaulted to InnoDB: {stored['spec']}")

        self.check(
            "references: PostgreSqlDatabaseTable users (hash on id, 4 partitions) and MariaDbDatabaseTable users (storageEngine defaulted to InnoDB) created",
            references,
            setup=True,
        )

        columns = [{"name": "id", "type": "uint64"}, {"name": "email", "type": "string", "nullable": True}]

        def admitted():
            users = self.manifest(
                "users",
                columns,
                references=[("MariaDbDatabaseTable", "users"), ("PostgreSqlDatabaseTable", "users")],
                preferredImplementation=MARIADB,
                policies=[NAMING],
            )
            stored = self.kube.create(users)
            spec = stored["spec"]
            if spec.get("deletionPolicy") != "Keep" or spec["columns"][0].get("nullable") is not False:
                raise Failure(f"deletionPolicy and nullable not defaulted (Keep, false): {spec}")

        self.check(
            f"admission: the seed's DatabaseTable users (id uint64, email string, preferring {MARIADB}, references to both kinds) admitted, "
            "defaults written (deletionPolicy Keep, nullable false)",
            admitted,
            setup=True,
        )

        def chosen():
            table = self.ready("users")
            choice = table["status"].get("implementationChoice") or {}
            wanted = {"kind": KIND, "preferred": MARIADB, "chosen": POSTGRES, "reason": "PreferredUnavailable"}
            if {k: choice.get(k) for k in wanted} != wanted or MARIADB not in choice.get("message", ""):
                raise Failure(f"status.implementationChoice is not {wanted} with a message naming {MARIADB}: {choice}")
            if FINALIZER not in table["metadata"].get("finalizers", []):
                raise Failure(f"no finalizer {FINALIZER}: {table['metadata'].get('finalizers')}")
            conditions = {c["type"]: c for c in table["status"].get("conditions", [])}
            if conditions.get("ReferencesResolved", {}).get("status") != "True":
                raise Failure(f"ReferencesResolved is not True: {conditions}")
            events = wait("an Event PreferredUnavailable about users", lambda: (bool(self.events("users", "PreferredUnavailable")), "none"), timeout=20)
            del events

        self.check(
            f"choice: {MARIADB} absent, {POSTGRES} chosen: Ready, status.implementationChoice says PreferredUnavailable and why, "
            f"an Event says so; finalizer {FINALIZER}; ReferencesResolved True",
            chosen,
        )

        self.check(
            "PostgreSQL: table users with the mapped types (id numeric(20,0) NOT NULL, email character varying(255))",
            lambda: self.wait_columns("users", "mapped types", lambda c: c == {"id": ("numeric(20,0)", True), "email": ("character varying(255)", False)}),
        )
        self.check(
            "PostgreSQL: users hash-partitioned in users_p0..users_p3, as its PostgreSqlDatabaseTable says",
            lambda: self.wait_pg(
                "users partitioned by hash in 4", lambda: self.partitioning("users")[:2], lambda p: p == ("h", [f"users_p{i}" for i in range(4)])
            ),
        )

        def partition_report():
            self.sql(f"INSERT INTO users (id, email) SELECT g, 'u' || g || '@example.com' FROM generate_series(1, {ROWS}) g")
            # A change of the referenced object reconciles the table (the operator watches it).
            self.kube.merge_patch(self.path("PostgreSqlDatabaseTable", "users"), {"metadata": {"annotations": {"e2e/touched": str(time.time())}}})

            def probe():
                report = self.report("users")
                partitions = report.get("partitions") or []
                done = report.get("partitionCount") == 4 and len(partitions) == 4 and sum(p.get("rows", 0) for p in partitions) == ROWS
                return done, report

            wait(f"status.cnpgiReports.{POSTGRES} of PostgreSqlDatabaseTable users: 4 partitions, {ROWS} rows in all", probe, timeout=60)

        self.check(
            f"reference report: {ROWS} rows inserted, the PostgreSqlDatabaseTable touched: its status.cnpgiReports.{POSTGRES} "
            f"has 4 partitions and their rows ({ROWS} in all)",
            partition_report,
        )

        def metrics():
            with urllib.request.urlopen(f"http://127.0.0.1:{self.args.metrics_port}/metrics", timeout=10) as answer:
                text = answer.read().decode()
            partitions = re.search(r'dbt_postgres_table_partitions\{namespace="tables",name="users",table="users"\} (\d+)', text)
            rows = [
                int(n) for n in re.findall(r'dbt_postgres_partition_rows\{namespace="tables",name="users",table="users",partition="users_p\d"\} (\d+)', text)
            ]
            if not partitions or partitions.group(1) != "4" or sum(rows) != ROWS:
                raise Failure(f"not 4 partitions and {ROWS} rows: {partitions and partitions.group(0)}, {rows}")

        self.check(f"metrics: the plugin's /metrics has 4 partitions for users and their rows ({ROWS} in all)", metrics)

        # --- changes ------------------------------------------------------------------------
        def added():
            self.update_spec("users", columns=[*columns, {"name": "created_at", "type": "timestamp", "nullable": True}])
            self.wait_columns("users", "created_at timestamp with time zone, nullable", lambda c: c.get("created_at") == ("timestamp with time zone", False))

        self.check("a column added (created_at timestamp, nullable) appears as timestamp with time zone", added, setup=True)

        columns = [
            {"name": "id", "type": "uint64"},
            {"name": "email", "type": "text", "nullable": True},
            {"name": "created_at", "type": "timestamp", "nullable": True},
        ]

        def changed():
            self.update_spec("users", columns=columns)
            self.wait_columns("users", "email text", lambda c: c.get("email") == ("text", False))

        self.check("a type change (email string to text) appears in PostgreSQL", changed, setup=True)

        def kept():
            stored = self.update_spec("users", columns=columns[:2])
            self.ready("users", stored["metadata"]["generation"])
            if "created_at" not in self.columns("users"):
                raise Failure(f"created_at was dropped: {self.columns('users')}")

        def dropped():
            self.update_spec("users", dropExtraColumns=True)
            self.wait_columns("users", "created_at dropped", lambda c: "created_at" not in c and "email" in c)

        self.check("a column removed from the spec (created_at) stays in PostgreSQL while dropExtraColumns is false (reconciled: Ready)", kept, setup=True)
        self.check("... and is dropped once dropExtraColumns is true", dropped, setup=True)

        def unchanged(change, field, message=""):
            before, stored = (self.columns("users"), self.partitioning("users")), self.table("users")
            self.refused(change, field, message)
            after = self.table("users")
            if after["metadata"]["generation"] != stored["metadata"]["generation"]:
                raise Failure(f"the refused change was stored (generation {after['metadata']['generation']})")
            if (self.columns("users"), self.partitioning("users")) != before:
                raise Failure(f"PostgreSQL changed: {before}")

        self.check(
            "an unknown type (strng) is refused, naming spec.columns[1].type; nothing changes",
            lambda: unchanged(lambda: self.update_spec("users", columns=[columns[0], {"name": "email", "type": "strng"}]), "spec.columns[1].type"),
        )
        self.check(
            "a new table name is refused by the plugin, naming spec.name (fixed once created); nothing changes",
            lambda: unchanged(lambda: self.kube.merge_patch(self.table_path("users"), {"spec": {"name": "people"}}), "spec.name", "cannot be changed"),
        )
        self.check(
            f"a column named user is refused by the naming policy ({NAMING}), naming spec.columns[2].name; nothing changes",
            lambda: unchanged(
                lambda: self.update_spec("users", columns=[*columns[:2], {"name": "user", "type": "text"}]), "spec.columns[2].name", RESERVED_MESSAGE
            ),
        )

        # --- partitionBy changed: the table rebuilt, nothing lost --------------------------------
        def repartitioned(partition_by, strategy, names):
            def change():
                self.kube.merge_patch(self.path("PostgreSqlDatabaseTable", "users"), {"spec": {"partitionBy": partition_by}})
                self.wait_pg(f"users partitioned {strategy or 'not'} {names}", lambda: self.partitioning("users"), lambda p: p == (strategy, names, ROWS))

                def probe():
                    report = self.report("users")
                    return report.get("partitionCount") == len(names) and [p["name"] for p in report.get("partitions", [])] == names, report

                wait("the partition report follows", probe, timeout=60)

            return change

        self.check(
            f"partitionBy changed to range on id: users rebuilt with users_default, all {ROWS} rows kept; the report says 1 partition",
            repartitioned({"type": "range", "column": "id"}, "r", ["users_default"]),
        )
        self.check(
            f"partitionBy changed to none: users rebuilt unpartitioned, all {ROWS} rows kept; the report says 0 partitions",
            repartitioned({"type": "none"}, "", []),
        )
        self.check(
            f"partitionBy back to hash in 3: users_p0..users_p2, all {ROWS} rows kept",
            repartitioned({"type": "hash", "column": "id", "partitions": 3}, "h", ["users_p0", "users_p1", "users_p2"]),
        )

        # --- a reference missing, then created ----------------------------------------------------
        def missing_reference():
            self.kube.create(self.manifest("visits", [{"name": "at", "type": "timestamp"}], references=[("PostgreSqlDatabaseTable", "visits")]))

            def probe():
                status = self.table("visits").get("status") or {}
                condition = {c["type"]: c for c in status.get("conditions", [])}.get("ReferencesResolved", {})
                done = (
                    condition.get("status") == "False"
                    and condition.get("reason") == "ReferenceNotFound"
                    and "spec.references[0]" in condition.get("message", "")
                    and status.get("phase") == "Failed"
                )
                return done, status

            wait("visits: ReferencesResolved False (ReferenceNotFound, spec.references[0]), phase Failed", probe)
            if self.columns("visits"):
                raise Failure("the table was created without its partitioning")

        self.check(
            "a missing PostgreSqlDatabaseTable: ReferencesResolved False naming spec.references[0], phase Failed, no table made",
            missing_reference,
            setup=True,
        )

        def reference_created():
            self.kube.create(self.pg_table("visits", {"type": "range", "column": "at"}))
            self.ready("visits")
            self.wait_pg("visits range-partitioned", lambda: self.partitioning("visits")[:2], lambda p: p == ("r", ["visits_default"]))

        self.check("... created: the table is reconciled (watched), Ready, range-partitioned with visits_default", reference_created)

        # --- deletion ---------------------------------------------------------------------------
        def deleted(name, policy, dropped):
            def run():
                self.kube.create(self.manifest(name, [{"name": "id", "type": "int64"}], deletionPolicy=policy))
                self.ready(name)
                self.wait_columns(name, "created", bool)
                self.kube.delete(self.table_path(name))
                self.gone(name, timeout=30)
                there = bool(self.columns(name))
                if there == dropped:
                    raise Failure(f"table {name} {'still there' if there else 'dropped'} in PostgreSQL")

            return run

        self.check(
            "deletion with deletionPolicy Delete: the table is dropped in PostgreSQL, the finalizer removed (the resource gone)",
            deleted("scratch", "Delete", True),
        )
        self.check("deletion with deletionPolicy Keep: the resource goes, the table stays in PostgreSQL", deleted("archive", "Keep", False))

        def orphan():
            self.kube.create(self.manifest("orphan", [{"name": "id", "type": "int32"}], deletionPolicy="Delete"))
            self.ready("orphan")
            self.wait_columns("orphan", "created", bool)

        self.check("a table orphan (deletionPolicy Delete) for the plugin-stopped phase: Ready, created", orphan, setup=True)

    def plugin_stopped(self):
        def noticed():
            def probe():
                gone = ("plugin forgotten", "plugin taken out of routing")
                lines = [line for line in self.operator_log().splitlines() if POSTGRES in line and any(g in line for g in gone)]
                return bool(lines), lines[-1:] or "no line"

            wait("the operator's log shows it forgotten or taken out of routing", probe, timeout=30)

        self.check(f"{POSTGRES} stopped: the operator noticed (forgotten or taken out of routing)", noticed, setup=True)

        def failed():
            def probe():
                status = self.table("users").get("status") or {}
                choice = status.get("implementationChoice") or {}
                message = status.get("message") or ""
                done = status.get("phase") == "Failed" and f"{POSTGRES}, the implementation serving this resource, is not available" in message
                return done and choice.get("chosen") == POSTGRES, status

            wait(f"users: phase Failed, the message naming {POSTGRES} unavailable, the record of its choice kept", probe, timeout=60)
            with open(self.state_file, "w", encoding="utf-8") as f:
                f.write("the status showed the plugin missing\n")

        self.check(
            f"{POSTGRES} stopped: users becomes Failed within 60 s, its message naming {POSTGRES} unavailable; the choice recorded stays (who served it)",
            failed,
        )

        def abandoned():
            self.kube.delete(self.table_path("orphan"))
            time.sleep(5)
            held = self.kube.maybe_get(self.table_path("orphan"))
            if held is None or FINALIZER not in held["metadata"].get("finalizers", []):
                raise Failure(f"not held by {FINALIZER} while its plugin cannot clean up: {held and held['metadata']}")
            self.gone("orphan", timeout=self.args.cleanup_deadline + 30)
            wait("an Event PluginCleanupAbandoned about orphan", lambda: (bool(self.events("orphan", "PluginCleanupAbandoned")), "none"), timeout=20)
            if not self.columns("orphan"):
                raise Failure("the table was dropped: no plugin was there to drop it")

        self.check(
            f"a table deleted while its plugin is down is held by {FINALIZER}, then let go at the cleanup deadline "
            f"({self.args.cleanup_deadline} s) with an Event PluginCleanupAbandoned; its table stays",
            abandoned,
        )

    def plugin_restarted(self):
        def rediscovered():
            def probe():
                lines = [line for line in self.operator_log().splitlines() if "plugin is routable" in line and POSTGRES in line]
                return len(lines) >= 2, f"{len(lines)} 'plugin is routable' line(s) naming it"

            wait("the operator's log shows it routable again", probe, timeout=30)

        def ready_again():
            if not os.path.exists(self.state_file):
                raise Failure("the status never showed the plugin missing (the check before): Ready proves nothing")
            table = self.ready("users")
            choice = table["status"].get("implementationChoice") or {}
            if choice.get("chosen") != POSTGRES:
                raise Failure(f"not routed to {POSTGRES} again: {choice}")

        self.check(f"{POSTGRES} started again: the operator found it again (routable)", rediscovered, setup=True)
        self.check(f"{POSTGRES} started again: users is Ready again within 60 s, {POSTGRES} chosen again", ready_again)

        def added():
            table = self.table("users")
            self.update_spec("users", columns=[*table["spec"]["columns"], {"name": "nickname", "type": "text", "nullable": True}])
            self.wait_columns("users", "nickname text, nullable", lambda c: c.get("nickname") == ("text", False))
            strategy, names, rows = self.partitioning("users")
            if (strategy, len(names), rows) != ("h", 3, ROWS):
                raise Failure(f"the partitions or rows changed: {strategy}, {names}, {rows}")

        self.check(f"{POSTGRES} started again: a column added then (nickname text) appears in PostgreSQL; partitions and rows as they were", added)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=["setup", "main", "plugin-stopped", "plugin-restarted"])
    parser.add_argument("--results", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--crd", required=True)
    parser.add_argument("--webhook-url", required=True)
    parser.add_argument("--webhook-ca", required=True)
    parser.add_argument("--pg-password", required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--cleanup-deadline", type=int, required=True, help="the operator's --cleanup-deadline, in seconds")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    e2e = E2E(args)
    getattr(e2e, args.phase.replace("-", "_"))()
    e2e.results.write("skipped\n" * e2e.checks.skipped)  # counted in e2e.sh's "not selected by CHECKS"
    sys.exit(1 if e2e.checks.failed else 0)


if __name__ == "__main__":
    main()
