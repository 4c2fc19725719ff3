#!/usr/bin/env python3
"""Issue 33's scenario: the DatabaseTable example as users run it, on real Pods.

The seed's walk (Kplug's): a database-agnostic `DatabaseTable` preferring
MariaDB, implementation-specific settings in the objects it references
(`PostgreSqlDatabaseTable`, `MariaDbDatabaseTable`), plugins in three
languages as Pods that register themselves with the operator over mutual TLS,
and a plugin told when a table goes away. Needs a kubeconfig whose cluster runs
CloudNativePG (up.sh installs it; --cnpg-manifest applies it again, unchanged)
and has cert-manager, cluster DNS and a default StorageClass, and whose nodes
hold the images (no pull):

    scenario_database_table.py --cnpg-manifest cnpg.yaml --manifest database-table.yaml \\
        --mariadb-plugin-manifest database-table-mariadb.yaml \\
        --postgres-image localhost/postgresql:15 --mariadb-image localhost/mariadb:10.11

`database-table.yaml` is examples/database-table/manifests built by kustomize
with the images set, `database-table-mariadb.yaml` its mariadb/ directory, both
applied as they are. The servers: CloudNativePG's Cluster `app-db` (one
instance, the Debian PostgreSQL image) and MariaDB as a Pod (Deployment and
Service `app-mariadb`, Secret `app-mariadb-app`), in namespace realkube-dbt.
The nine named checks of the issue, each `ok <name>` or `FAIL <name>: <why>`,
after the set-up steps (also named), and `N passed, M failed` at the end (exit
1 on any failure). A failure names what was seen.

Check 6 (the PostgreSQL plugin forgotten) runs after check 5 (the MariaDB
plugin installed), as the issue orders them: with another implementation of
the kind ready, the tables PostgreSQL's plugin served stay with it while it is
away (the host's choice rule, crates/host/src/choice.rs: a resource does not
move to another server by itself), and are Ready again when it is back.
"""

import argparse
import base64
import json
import os
import re
import sys
import tempfile
import time
import urllib.request

import realkube
from realkube import ApiError, Failure, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pki  # tests/lib, on the path once realkube is imported

SYSTEM = "database-table-system"
CNPG_NS = "cnpg-system"
NS = "realkube-dbt"
GROUP = "example.cnpgi.io"
POSTGRES = "postgres.tables.example.cnpgi.io"
MARIADB = "mariadb.tables.example.cnpgi.io"
NAMING = "naming.tables.example.cnpgi.io"
PG_CLUSTER = "app-db"
MARIADB_SERVER = "app-mariadb"
MARIADB_SECRET = "app-mariadb-app"
# The operator's lease (manifests: --registration-ttl=30s).
TTL = 30
OPERATOR_SELECTOR = "app.kubernetes.io/name=database-table-operator"


def namespace_conditions(ns):
    """What a Terminating namespace still waits for, from its status's conditions
    (NamespaceContentRemaining, NamespaceFinalizersRemaining, a discovery failure)."""
    said = [f"{c['type']}: {c.get('message', '')}" for c in (ns.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    return "; ".join(said) or f"phase {(ns.get('status') or {}).get('phase')}, no condition"


def api_path(plural, name=None, ns=NS, subresource=None):
    path = f"/apis/{GROUP}/v1/namespaces/{ns}/{plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


def table(name, server, preferred, columns, references=(), policies=(NAMING,), **spec):
    """A DatabaseTable as the seed writes it."""
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "DatabaseTable",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "name": name,
            "serverName": server,
            "preferredImplementation": preferred,
            "policies": list(policies),
            "columns": columns,
            "references": [{"apiVersion": f"{GROUP}/v1", "kind": kind, "name": ref} for kind, ref in references],
            **spec,
        },
    }


USERS_COLUMNS = [{"name": "id", "type": "uint64"}, {"name": "email", "type": "string", "nullable": True}]


class Scenario(realkube.Scenario):
    title = "database-table"

    def __init__(self, args):
        super().__init__(args)
        self.mariadb_password = base64.b32encode(os.urandom(10)).decode().lower()
        self.started = time.monotonic()

    # -- helpers

    def dbt(self, name):
        return self.api.get(api_path("databasetables", name))

    def status(self, name):
        return self.dbt(name).get("status") or {}

    def poke(self, name):
        """An annotation changed on the table: the operator reconciles it now
        (a Ready table is otherwise looked at again only after 5 minutes)."""
        self.api.merge_patch(api_path("databasetables", name), {"metadata": {"annotations": {"realkube/poke": str(time.time_ns())}}})

    def wait_phase(self, name, phase="Ready", timeout=120, poke_every=None, also=None):
        """Waits for the table's phase (and observedGeneration = generation);
        `also(status)` may raise Failure for more conditions. Returns the status."""
        last_poke = time.monotonic()

        def probe():
            nonlocal last_poke
            obj = self.dbt(name)
            status = obj.get("status") or {}
            if poke_every and time.monotonic() - last_poke > poke_every:
                last_poke = time.monotonic()
                self.poke(name)
            if status.get("phase") != phase or status.get("observedGeneration") != obj["metadata"].get("generation"):
                raise Failure(
                    f"{name}: phase {status.get('phase')!r} (generation {obj['metadata'].get('generation')}, observed "
                    f"{status.get('observedGeneration')}), message {status.get('message')!r}"
                )
            if also:
                also(status)
            return status

        return wait_for(f"DatabaseTable {name} {phase}", probe, timeout=timeout, interval=1)

    def operator_log(self, since=None):
        args = ["-n", SYSTEM, "logs", "deployment/database-table-operator", "--tail=-1"]
        if since:
            args.append(f"--since={since}")
        return self.kubectl(*args)

    def registrations(self, plugin):
        """The operator's log lines that say `plugin` registered."""
        return [line for line in self.operator_log().splitlines() if "plugin registered" in line and plugin in line]

    def app_db_pod(self):
        pods = [p for p in self.live_pods(NS, f"cnpg.io/cluster={PG_CLUSTER},cnpg.io/podRole=instance") if self.ready(p)]
        if not pods:
            raise Failure(f"no ready instance Pod of Cluster {PG_CLUSTER}")
        return pods[0]["metadata"]["name"]

    def pg(self, sql):
        """psql as postgres in the app database of app-db (the tables' database)."""
        return self.psql(NS, self.app_db_pod(), sql, database="app")

    def pg_columns(self, name):
        return self.pg(
            "select column_name || ' ' || case when data_type = 'numeric' then format('numeric(%s,%s)', numeric_precision, numeric_scale)"
            " when data_type = 'character varying' then format('varchar(%s)', character_maximum_length) else data_type end"
            f" || ' ' || is_nullable from information_schema.columns where table_schema = 'public' and table_name = '{name}'"
            " order by ordinal_position"
        ).splitlines()

    def pg_partitions(self, name):
        """(strategy, [partition names]) of a partitioned table, (None, []) of a plain one."""
        strategy = self.pg(f"select partstrat from pg_partitioned_table where partrelid = 'public.{name}'::regclass")
        children = self.pg(
            f"select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid where i.inhparent = 'public.{name}'::regclass order by 1"
        )
        return strategy or None, children.split()

    def pg_exists(self, name):
        return self.pg(f"select count(*) from pg_class where relname = '{name}' and relnamespace = 'public'::regnamespace") == "1"

    def mariadb(self, sql):
        pod = [p for p in self.live_pods(NS, f"app.kubernetes.io/name={MARIADB_SERVER}") if self.ready(p)]
        if not pod:
            raise Failure("no ready MariaDB Pod")
        return self.kubectl(
            "-n", NS, "exec", pod[0]["metadata"]["name"], "--", "env", f"MYSQL_PWD={self.mariadb_password}",
            "mariadb", "-h", "127.0.0.1", "-u", "app", "app", "-N", "-B", "-e", sql,
        ).strip()  # fmt: skip

    def refused(self, what, obj, needles, method="create"):
        """An API call the admission webhooks must refuse; the message must
        contain every needle. Returns the message. A patch that is admitted
        is undone (obj["undo"]) before the check fails."""
        try:
            if method == "create":
                self.api.create(obj, dry_run=True)
            else:
                path = api_path("databasetables", obj["name"])
                self.api.request("PATCH", path, obj["patch"], content_type="application/merge-patch+json")
                self.api.merge_patch(path, obj["undo"])
        except ApiError as e:
            message = str(e)
            missing = [n for n in needles if n not in message]
            if e.status not in (400, 403, 422) or missing:
                raise Failure(f"{what}: refused, but the answer lacks {missing}: {message[:600]}") from None
            return message
        raise Failure(f"{what}: admitted")

    def report(self, plural, name, plugin):
        status = self.api.get(api_path(plural, name)).get("status") or {}
        report = (status.get("cnpgiReports") or {}).get(plugin)
        if not report:
            raise Failure(f"{plural}/{name} has no report of {plugin}: status {json.dumps(status)[:400]}")
        return report

    def secret_data(self, ns, name):
        return {k: base64.b64decode(v) for k, v in self.api.get(f"/api/v1/namespaces/{ns}/secrets/{name}")["data"].items()}

    # -- set-up

    def apply_cnpg(self):
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", self.args.cnpg_manifest, timeout=300)
        self.rollout(CNPG_NS, "cnpg-controller-manager", timeout=240)

    def servers(self):
        """The namespace, CloudNativePG's Cluster app-db and MariaDB's Pod; their
        readiness is waited for later, while the operator starts."""
        self.namespace(NS)
        labels = {"app.kubernetes.io/name": MARIADB_SERVER}
        security = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 999,
            "runAsGroup": 999,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        env = [
            {"name": f"MARIADB_{var}", "valueFrom": {"secretKeyRef": {"name": MARIADB_SECRET, "key": key}}}
            for var, key in (("DATABASE", "dbname"), ("USER", "username"), ("PASSWORD", "password"))
        ]
        # The official image (RK_UPSTREAM_IMAGES=1) wants a root password policy; the Debian one has no root login.
        env.append({"name": "MARIADB_RANDOM_ROOT_PASSWORD", "value": "1"})
        self.apply_objects(
            {
                "apiVersion": "postgresql.cnpg.io/v1",
                "kind": "Cluster",
                "metadata": {"name": PG_CLUSTER, "namespace": NS},
                "spec": {"instances": 1, "imageName": self.args.postgres_image, "storage": {"size": "1Gi"}},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": MARIADB_SECRET, "namespace": NS},
                "type": "kubernetes.io/basic-auth",
                "stringData": {"username": "app", "password": self.mariadb_password, "dbname": "app"},
            },
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": MARIADB_SERVER, "namespace": NS, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "automountServiceAccountToken": False,
                            "enableServiceLinks": False,
                            "securityContext": {"fsGroup": 999},
                            "containers": [
                                {
                                    "name": "mariadb",
                                    "image": self.args.mariadb_image,
                                    "imagePullPolicy": "IfNotPresent",
                                    "env": env,
                                    "ports": [{"name": "mysql", "containerPort": 3306}],
                                    "readinessProbe": {"tcpSocket": {"port": "mysql"}, "periodSeconds": 2},
                                    "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                                    "securityContext": security,
                                    "volumeMounts": [
                                        {"name": "data", "mountPath": "/var/lib/mysql"},
                                        {"name": "run", "mountPath": "/run/mysqld"},
                                        {"name": "tmp", "mountPath": "/tmp"},
                                    ],
                                }
                            ],
                            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "run", "emptyDir": {"medium": "Memory"}}, {"name": "tmp", "emptyDir": {}}],
                        },
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": MARIADB_SERVER, "namespace": NS, "labels": labels},
                "spec": {"selector": labels, "ports": [{"name": "mysql", "port": 3306, "targetPort": "mysql"}]},
            },
        )

    def apply_manifests(self):
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", self.args.manifest, timeout=240)

    def components_ready(self):
        self.certificates_ready(
            SYSTEM,
            [
                "database-table-operator-ca",
                "database-table-plugins-ca",
                "database-table-operator-server",
                "database-table-operator-client",
                "database-table-postgres-server",
                "database-table-postgres-registration",
                "database-table-naming-server",
                "database-table-naming-registration",
            ],
            [
                "database-table-operator-server-tls",
                "database-table-operator-client-tls",
                "database-table-postgres-server-tls",
                "database-table-naming-server-tls",
            ],
        )
        for deployment in ("database-table-operator", "database-table-postgres", "database-table-naming"):
            self.rollout(SYSTEM, deployment, timeout=180)
        self.wait_endpoints(SYSTEM, "database-table-operator", OPERATOR_SELECTOR)

        def injected():
            for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
                for hook in self.api.get(f"/apis/admissionregistration.k8s.io/v1/{kind}/database-table-operator")["webhooks"]:
                    if not hook["clientConfig"].get("caBundle"):
                        raise Failure(f"{kind}/database-table-operator {hook['name']} has no caBundle yet")
            return True

        wait_for("cert-manager's cainjector fills the webhooks' caBundle", injected, timeout=60, interval=1)

    def servers_ready(self):
        def cluster_healthy():
            status = self.api.get(f"/apis/postgresql.cnpg.io/v1/namespaces/{NS}/clusters/{PG_CLUSTER}").get("status") or {}
            if status.get("phase") != "Cluster in healthy state" or status.get("readyInstances") != 1:
                raise Failure(f"Cluster {PG_CLUSTER}: phase {status.get('phase')!r}, readyInstances {status.get('readyInstances')}")
            return True

        wait_for(f"CloudNativePG's Cluster {PG_CLUSTER} healthy", cluster_healthy, timeout=420, interval=3)
        secret = self.secret_data(NS, f"{PG_CLUSTER}-app")
        missing = [k for k in ("username", "password", "dbname") if k not in secret]
        if missing:
            raise Failure(f"Secret {PG_CLUSTER}-app has no {missing}: keys {sorted(secret)}")
        self.rollout(NS, MARIADB_SERVER, timeout=180)
        wait_for("MariaDB answers as app", lambda: self.mariadb("select 1") == "1", timeout=60, interval=2)

    # -- the checks

    def started_and_registered(self):
        def probe():
            missing = [p for p in (POSTGRES, NAMING) if not self.registrations(p)]
            if missing:
                raise Failure(f"the operator's log says nothing of {missing} registering")
            return True

        wait_for("the PostgreSQL and naming plugins registered", probe, timeout=90, interval=2)
        if self.api.maybe_get(f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/database-table-mariadb"):
            raise Failure("the MariaDB plugin is installed already")
        if self.registrations(MARIADB):
            raise Failure(f"the operator's log says {MARIADB} registered: {self.registrations(MARIADB)[-1]}")

    def users_admitted(self):
        # The plugins check names and types at admission: a reserved word (the
        # naming policy, Go) and an unknown type are refused with their field path.
        self.refused(
            "a column named select",
            table("users", PG_CLUSTER, MARIADB, [*USERS_COLUMNS, {"name": "select", "type": "string"}]),
            ["spec.columns[2].name", "select"],
        )
        self.refused(
            "a column of type varchar",
            table("users", PG_CLUSTER, MARIADB, [*USERS_COLUMNS, {"name": "nick", "type": "varchar"}]),
            ["spec.columns[2].type"],
        )
        self.apply_objects(
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "PostgreSqlDatabaseTable",
                "metadata": {"name": "users", "namespace": NS},
                "spec": {"partitionBy": {"type": "hash", "column": "id", "partitions": 4}},
            },
            {"apiVersion": f"{GROUP}/v1", "kind": "MariaDbDatabaseTable", "metadata": {"name": "users", "namespace": NS}, "spec": {"storageEngine": "InnoDB"}},
        )
        users = table(
            "users",
            PG_CLUSTER,
            MARIADB,
            USERS_COLUMNS,
            references=[("MariaDbDatabaseTable", "users"), ("PostgreSqlDatabaseTable", "users")],
        )
        self.api.create(users)

        def chosen(status):
            choice = status.get("implementationChoice") or {}
            if choice.get("chosen") != POSTGRES or choice.get("preferred") != MARIADB or not choice.get("reason"):
                raise Failure(f"implementationChoice {choice}")
            names = sorted(p.get("name") for p in status.get("plugins") or [])
            if names != sorted([POSTGRES, NAMING]):
                raise Failure(f"status.plugins names {names}")

        status = self.wait_phase("users", timeout=120, also=chosen)
        choice = status["implementationChoice"]
        events = [e for e in self.events(NS, "DatabaseTable", "users") if POSTGRES in (e.get("message") or e.get("note") or "")]
        if not events:
            raise Failure(f"no Event naming {POSTGRES} for users (events: {[e.get('reason') for e in self.events(NS, 'DatabaseTable', 'users')]})")
        print(f"  (users: chose {choice['chosen']}, reason {choice['reason']}: {choice.get('message')})", flush=True)

    def users_in_postgres(self):
        def probe():
            columns = self.pg_columns("users")
            expected = ["id numeric(20,0) NO", "email varchar(255) YES"]
            if columns != expected:
                raise Failure(f"users' columns in PostgreSQL: {columns}, not {expected}")
            strategy, parts = self.pg_partitions("users")
            if strategy != "h" or parts != [f"users_p{i}" for i in range(4)]:
                raise Failure(f"users' partitions: strategy {strategy!r}, {parts}")
            return True

        wait_for("users in app-db: columns mapped, 4 hash partitions", probe, timeout=60, interval=2)
        self.pg("insert into users (id, email) select g, 'u' || g || '@example.com' from generate_series(1, 40) g")
        self.poke("users")

        def metrics():
            report = self.report("postgresqldatabasetables", "users", POSTGRES)
            parts = report.get("partitions") or []
            if report.get("partitionCount") != 4 or sorted(p.get("name") for p in parts) != [f"users_p{i}" for i in range(4)]:
                raise Failure(f"report {report}")
            if sum(p.get("rows") or 0 for p in parts) != 40:
                raise Failure(f"rows per partition {[(p.get('name'), p.get('rows')) for p in parts]}, not 40 in all")
            return report

        report = wait_for("the partition metrics in PostgreSqlDatabaseTable users' status", metrics, timeout=60, interval=2)
        print(f"  (users' partitions: {[(p['name'], p['rows']) for p in report['partitions']]})", flush=True)
        # The same on the plugin's /metrics.
        pod = next(p["metadata"]["name"] for p in self.live_pods(SYSTEM, "app.kubernetes.io/name=database-table-postgres") if self.ready(p))
        with self.port_forward(SYSTEM, f"pod/{pod}", 9187) as port, urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        labels = f'namespace="{NS}",name="users",table="users"'
        count = re.findall(r"^dbt_postgres_table_partitions\{([^}]*)\} (\S+)$", text, re.M)
        rows = re.findall(r"^dbt_postgres_partition_rows\{([^}]*)\} (\S+)$", text, re.M)
        if not any(all(label in ls for label in labels.split(",")) and float(v) == 4 for ls, v in count):
            raise Failure(f"the plugin's /metrics has no dbt_postgres_table_partitions 4 for users: {count}")
        total = sum(float(v) for ls, v in rows if all(label in ls for label in labels.split(",")))
        if total != 40:
            raise Failure(f"the plugin's /metrics counts {total} rows in users' partitions, not 40: {rows}")

    def changes_applied(self):
        self.api.merge_patch(api_path("postgresqldatabasetables", "users"), {"spec": {"partitionBy": {"type": "hash", "column": "id", "partitions": 8}}})
        self.api.merge_patch(
            api_path("databasetables", "users"), {"spec": {"columns": [*USERS_COLUMNS, {"name": "created_at", "type": "timestamp", "nullable": True}]}}
        )

        def probe():
            _, parts = self.pg_partitions("users")
            columns = self.pg_columns("users")
            if parts != sorted(f"users_p{i}" for i in range(8)) or "created_at timestamp with time zone YES" not in columns:
                raise Failure(f"users: partitions {parts}, columns {columns}")
            rows = self.pg("select count(*) from users")
            if rows != "40":
                raise Failure(f"users has {rows} rows after the change, not 40")
            return True

        wait_for("users rebuilt with 8 hash partitions and a created_at column, its 40 rows kept", probe, timeout=90, interval=2)
        self.wait_phase("users", timeout=60)
        generation = self.dbt("users")["metadata"]["generation"]
        columns = self.dbt("users")["spec"]["columns"]
        before = self.pg_columns("users")
        self.refused(
            "a column of an unknown type",
            {
                "name": "users",
                "patch": {"spec": {"columns": [*USERS_COLUMNS, {"name": "created_at", "type": "datetime"}]}},
                "undo": {"spec": {"columns": columns}},
            },
            ["spec.columns[2].type"],
            method="patch",
        )
        self.refused(
            "the table renamed", {"name": "users", "patch": {"spec": {"name": "people"}}, "undo": {"spec": {"name": "users"}}}, ["spec.name"], method="patch"
        )
        after = self.dbt("users")["metadata"]["generation"]
        if after != generation or self.pg_columns("users") != before:
            raise Failure(f"a refused change changed something: generation {generation} -> {after}, columns {before} -> {self.pg_columns('users')}")

    def mariadb_arrives(self):
        before = len(self.registrations(MARIADB))
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", self.args.mariadb_plugin_manifest)
        self.certificates_ready(SYSTEM, ["database-table-mariadb-server", "database-table-mariadb-registration"], ["database-table-mariadb-server-tls"])
        self.rollout(SYSTEM, "database-table-mariadb", timeout=180)
        wait_for(f"{MARIADB} registers", lambda: len(self.registrations(MARIADB)) > before, timeout=90, interval=2)
        # The rule: a recorded choice sticks while its plugin is ready; the
        # preferred plugin arriving moves nothing (no flapping).
        self.poke("users")
        time.sleep(5)
        status = self.wait_phase("users", timeout=60)
        if status["implementationChoice"].get("chosen") != POSTGRES:
            raise Failure(f"users moved when MariaDB arrived: {status['implementationChoice']}")
        self.apply_objects(
            {"apiVersion": f"{GROUP}/v1", "kind": "MariaDbDatabaseTable", "metadata": {"name": "orders", "namespace": NS}, "spec": {"storageEngine": "Aria"}},
        )
        orders = table(
            "orders",
            MARIADB_SERVER,
            MARIADB,
            [
                {"name": "id", "type": "uint64"},
                {"name": "user_id", "type": "uint64"},
                {"name": "total", "type": "float64"},
                {"name": "placed", "type": "timestamp"},
            ],
            references=[("MariaDbDatabaseTable", "orders")],
        )
        self.api.create(orders)

        def on_mariadb(status):
            if (status.get("implementationChoice") or {}).get("chosen") != MARIADB:
                raise Failure(f"orders' implementationChoice {status.get('implementationChoice')}")

        self.wait_phase("orders", timeout=90, also=on_mariadb)
        engine = self.mariadb("select engine from information_schema.tables where table_schema = 'app' and table_name = 'orders'")
        columns = self.mariadb(
            "select group_concat(concat(column_name, ' ', column_type) order by ordinal_position separator ', ')"
            " from information_schema.columns where table_schema = 'app' and table_name = 'orders'"
        )
        expected = "id bigint(20) unsigned, user_id bigint(20) unsigned, total double, placed datetime(6)"
        if engine != "Aria" or columns != expected:
            raise Failure(f"orders in MariaDB: engine {engine!r}, columns {columns!r} (expected Aria; {expected})")
        report = wait_for("MariaDbDatabaseTable orders' report", lambda: self.report("mariadbdatabasetables", "orders", MARIADB), timeout=30, interval=2)
        if report.get("engine") != "Aria":
            raise Failure(f"orders' report {report}")

    def create_audit(self):
        """audit: preferring PostgreSQL, dropped when deleted (check 8)."""
        self.apply_objects(
            {"apiVersion": f"{GROUP}/v1", "kind": "PostgreSqlDatabaseTable", "metadata": {"name": "audit", "namespace": NS}, "spec": {}},
        )
        audit = table(
            "audit",
            PG_CLUSTER,
            POSTGRES,
            [{"name": "id", "type": "int64"}, {"name": "what", "type": "text"}, {"name": "ok", "type": "bool"}],
            references=[("PostgreSqlDatabaseTable", "audit")],
            deletionPolicy="Delete",
        )
        self.api.create(audit)
        self.wait_phase("audit", timeout=90)
        wait_for("audit in app-db", lambda: self.pg_exists("audit"), timeout=30, interval=2)

    def postgres_forgotten(self):
        # The MariaDB plugin is installed and ready (check 5): the tables stay
        # with PostgreSQL's plugin while it is away (no move by themselves).
        self.create_audit()
        self.kubectl("-n", SYSTEM, "scale", "deployment/database-table-postgres", "--replicas=0")
        gone_at = time.monotonic()
        wait_for("the PostgreSQL plugin's Pods gone", lambda: not self.pods(SYSTEM, "app.kubernetes.io/name=database-table-postgres"), timeout=60, interval=1)

        def says_forgotten(status):
            if "forgotten" not in (status.get("message") or ""):
                raise Failure(f"audit: {status.get('message')!r}")
            choice = status.get("implementationChoice") or {}
            if choice.get("chosen") != POSTGRES or "forgotten" not in (choice.get("unavailable") or ""):
                raise Failure(f"audit's implementationChoice while its plugin is away: {choice}")

        # No poke: the operator must reconcile the tables of a forgotten plugin by itself.
        status = self.wait_phase("audit", phase="Failed", timeout=TTL + 60, also=says_forgotten)
        print(f"  (audit said so {time.monotonic() - gone_at:.0f} s after the Pods were gone: {status['message'][:200]})", flush=True)
        users = self.wait_phase("users", phase="Failed", timeout=30, also=says_forgotten)
        print(f"  (users: {users.get('message', '')[:200]}; choice {users.get('implementationChoice')})", flush=True)
        before = len(self.registrations(POSTGRES))
        self.kubectl("-n", SYSTEM, "scale", "deployment/database-table-postgres", "--replicas=1")
        self.rollout(SYSTEM, "database-table-postgres", timeout=120)
        wait_for(f"{POSTGRES} registers again", lambda: len(self.registrations(POSTGRES)) > before, timeout=90, interval=2)

        def on_postgres(status):
            if (status.get("implementationChoice") or {}).get("chosen") != POSTGRES:
                raise Failure(f"moved off PostgreSQL: {status.get('implementationChoice')}")

        for name in ("audit", "users"):
            self.wait_phase(name, timeout=90, also=on_postgres)
        if not self.pg_exists("audit") or not self.pg_exists("users"):
            raise Failure("audit or users is no longer in app-db")

    def rogue_refused(self):
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # the refused handshake is expected: no C-core error lines
        try:
            import grpc
        except ImportError:
            raise Failure("this check needs grpcio on this machine (pip install -r examples/database-table/plugins/mariadb/requirements.txt)") from None
        operator_ca = self.secret_data(SYSTEM, "database-table-operator-ca")["ca.crt"]
        naming = self.secret_data(SYSTEM, "database-table-naming-registration-tls")
        pods = [p["metadata"]["name"] for p in self.live_pods(SYSTEM, OPERATOR_SELECTOR) if self.ready(p)]
        if not pods:
            raise Failure("no ready operator Pod")
        pod = pods[0]
        with tempfile.TemporaryDirectory() as d:
            # A certificate naming the PostgreSQL plugin, from a CA the operator does not trust.
            pki.ca(d, "rogue-ca", "/CN=rogue-ca")
            crt, key = pki.leaf(d, "rogue", f"/CN={POSTGRES}", f"DNS:{POSTGRES}", "clientAuth", ca="rogue-ca")
            with open(crt, "rb") as f, open(key, "rb") as g:
                rogue = (f.read(), g.read())

            def register(port, cert, key, name):
                credentials = grpc.ssl_channel_credentials(root_certificates=operator_ca, private_key=key, certificate_chain=cert)
                options = [("grpc.ssl_target_name_override", f"database-table-operator.{SYSTEM}.svc")]
                with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=options) as channel:
                    call = channel.unary_unary("/cnpgi.registration.v1.Registration/Register", request_serializer=None, response_deserializer=None)
                    request = register_request(name, "6.6.6", "rogue.example.com:9090")
                    try:
                        call(request, timeout=15)
                    except grpc.RpcError as e:
                        return e.code(), e.details()
                    return None, "registered"

            with self.port_forward(SYSTEM, f"pod/{pod}", 9090) as port:
                code, details = register(port, *rogue, POSTGRES)
                if code is None or code == grpc.StatusCode.OK:
                    raise Failure(f"a certificate of an untrusted CA registered {POSTGRES}: {details}")
                print(f"  (untrusted CA: {code.name}: {details[:160]})", flush=True)
            with self.port_forward(SYSTEM, f"pod/{pod}", 9090) as port:
                code, details = register(port, naming["tls.crt"], naming["tls.key"], POSTGRES)
                if code != grpc.StatusCode.PERMISSION_DENIED or NAMING not in details:
                    raise Failure(f"the naming plugin's certificate registering {POSTGRES}: {code} {details}")
                print(f"  (a trusted certificate of another plugin: {code.name}: {details[:160]})", flush=True)
        # Still the real plugin behind the name.
        self.poke("users")
        self.wait_phase("users", timeout=60)
        if "rogue.example.com" in self.operator_log():
            lines = [line for line in self.operator_log().splitlines() if "rogue.example.com" in line]
            if any("plugin registered" in line for line in lines):
                raise Failure(f"the operator registered the rogue address: {lines[-1]}")

    def deletion(self):
        if self.api.maybe_get(api_path("databasetables", "audit")) is None:
            self.create_audit()
        self.wait_phase("audit", timeout=60)
        finalizers = self.dbt("audit")["metadata"].get("finalizers") or []
        if "cnpgi.io/plugins" not in finalizers:
            raise Failure(f"audit's finalizers {finalizers}: no cnpgi.io/plugins")
        for name in ("audit", "users"):
            self.api.delete(api_path("databasetables", name))
        for name in ("audit", "users"):
            wait_for(
                f"DatabaseTable {name} gone (finalizer removed)",
                lambda n=name: self.api.maybe_get(api_path("databasetables", n)) is None,
                timeout=90,
                interval=1,
            )
        if self.pg_exists("audit"):
            raise Failure("audit (deletionPolicy Delete) is still in app-db")
        if not self.pg_exists("users") or self.pg("select count(*) from users") != "40":
            raise Failure("users (deletionPolicy Keep) is no longer in app-db with its 40 rows")

    def namespace_left(self, name):
        """`namespace NAME (its Pods; what it waits for)` while it exists, else None."""
        ns = self.api.maybe_get(f"/api/v1/namespaces/{name}")
        if not ns:
            return None
        pods = [p["metadata"]["name"] for p in self.pods(name, "")]
        return f"namespace {name} (Pods {pods}; {namespace_conditions(ns)})"

    def nothing_left(self):
        # The remaining tables (while their plugins still run to answer), then
        # the example as it was applied.
        self.api.delete(api_path("databasetables"))

        def tables_gone():
            left = [t["metadata"]["name"] for t in self.api.get(api_path("databasetables"))["items"]]
            if left:
                raise Failure(f"DatabaseTables left: {left}")
            return True

        wait_for("every DatabaseTable gone", tables_gone, timeout=90, interval=1)
        # The scenario's namespace (the Cluster, MariaDB) first, while
        # CloudNativePG, the example's CRD and its webhooks are all still
        # there: deleted together, the namespace controller could meet the CRD
        # going away mid-discovery and back off (a warm run saw the namespace,
        # its Pods gone, still there 180 s later).
        self.kubectl("delete", "namespace", NS, "--wait=false", "--ignore-not-found")

        def namespace_gone():
            left = self.namespace_left(NS)
            if left:
                raise Failure(f"{left} still there")
            return True

        wait_for(f"namespace {NS} deleted", namespace_gone, timeout=180, interval=2)
        self.kubectl("delete", "--wait=false", "--ignore-not-found", "-f", self.args.mariadb_plugin_manifest)
        self.kubectl("delete", "--wait=false", "--ignore-not-found", "-f", self.args.manifest)

        def gone():
            left = [n for n in (self.namespace_left(SYSTEM),) if n]
            for path in (
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/database-table-operator",
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/database-table-operator",
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/database-table-operator",
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/database-table-postgres",
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/database-table-mariadb",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/databasetables.example.cnpgi.io",
            ):
                if self.api.maybe_get(path):
                    left.append(path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1])
            if left:
                raise Failure("left: " + "; ".join(left))
            return True

        wait_for("everything the scenario made deleted", gone, timeout=180, interval=2)

    def notes(self):
        print(f"  (scenario took {time.monotonic() - self.started:.0f} s)", flush=True)

    def explain_commands(self):
        return [
            ("get", "pods", "-A", "-o", "wide"),
            ("-n", NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", SYSTEM, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", NS, "get", "databasetables.example.cnpgi.io", "-o", "yaml"),
            ("-n", SYSTEM, "logs", "deployment/database-table-operator", "--tail=60"),
            ("-n", SYSTEM, "logs", "deployment/database-table-postgres", "--tail=30"),
            ("-n", SYSTEM, "logs", "deployment/database-table-naming", "--tail=30"),
            ("-n", SYSTEM, "logs", "deployment/database-table-mariadb", "--tail=30"),
        ]

    def run(self):
        steps = [
            ("set-up: CloudNativePG's config/default applied as is (server-side), its operator Ready", self.apply_cnpg),
            ("set-up: namespace realkube-dbt (restricted), CloudNativePG's Cluster app-db and MariaDB's Pod applied", self.servers),
            ("set-up: examples/database-table/manifests applied as is (server-side)", self.apply_manifests),
            ("set-up: certificates issued, the operator and the two plugins Ready, the webhooks' caBundle injected", self.components_ready),
            ("set-up: Cluster app-db healthy (its app Secret: username, password, dbname), MariaDB answering", self.servers_ready),
            (
                "1. the operator and the PostgreSQL and naming plugins start; the plugins register; the MariaDB plugin is not installed",
                self.started_and_registered,
            ),
            (
                "2. the seed's users table (preferring MariaDB) admitted, names and types checked by plugins; PostgreSQL chosen, the status says so and why",
                self.users_admitted,
            ),
            (
                "3. users is in app-db: agnostic types mapped, 4 hash partitions as its PostgreSqlDatabaseTable says, their metrics in its status and /metrics",
                self.users_in_postgres,
            ),
            ("4. partitionBy and a new column applied (rows kept); a bad change refused with its field path, nothing changed", self.changes_applied),
            (
                "5. the MariaDB plugin installed registers; users stays on PostgreSQL; orders preferring MariaDB lands there with its engine (Aria)",
                self.mariadb_arrives,
            ),
            (
                f"6. the PostgreSQL plugin kept down is forgotten after the TTL ({TTL} s), its tables say so and stay on it; back, they are Ready",
                self.postgres_forgotten,
            ),
            ("7. a rogue client certificate cannot register a plugin (an untrusted CA; another plugin's trusted certificate)", self.rogue_refused),
            ("8. a table with deletionPolicy Delete is dropped when deleted and its finalizer removed; one with Keep keeps its table", self.deletion),
            ("9. nothing is left behind", self.nothing_left),
        ]
        fatal = (self.apply_cnpg, self.servers, self.apply_manifests, self.components_ready, self.servers_ready, self.users_admitted)
        return self.run_steps(steps, fatal=fatal)


def register_request(name, version, address):
    """cnpgi.registration.v1.RegisterRequest, encoded by hand (fields 1-3, strings)."""

    def field(number, value):
        data = value.encode()
        length = len(data)
        varint = b""
        while True:
            byte = length & 0x7F
            length >>= 7
            varint += bytes([byte | (0x80 if length else 0)])
            if not length:
                break
        return bytes([(number << 3) | 2]) + varint + data

    return field(1, name) + field(2, version) + field(3, address)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--cnpg-manifest", required=True, help="CloudNativePG's config/default (tests/realkube/cnpg.sh manifest)")
    p.add_argument("--manifest", required=True, help="examples/database-table/manifests built by kustomize, images set")
    p.add_argument("--mariadb-plugin-manifest", required=True, help="examples/database-table/manifests/mariadb built by kustomize, image set")
    p.add_argument("--postgres-image", required=True, help="app-db's PostgreSQL image, present on the nodes")
    p.add_argument("--mariadb-image", required=True, help="the MariaDB server's image, present on the nodes")
    args = p.parse_args()
    if not args.kubeconfig:
        sys.exit("scenario_database_table.py: no kubeconfig (--kubeconfig or KUBECONFIG)")
    sys.exit(Scenario(args).run())


if __name__ == "__main__":
    main()
