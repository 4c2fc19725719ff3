#!/usr/bin/env python3
"""The checks of the DatabaseTable e2e test, run by e2e.sh (see there) in phases:

  setup             the Kubernetes objects users would apply: the namespace,
                    the credentials Secret, the CRD, the webhook configurations;
  main              discovery, admission (defaulting, refusals by both
                    plugins), the table in PostgreSQL following the resource,
                    the status;
  plugin-stopped    e2e.sh stopped postgres.tables.example.cnpgi.io: the
                    status says so;
  plugin-restarted  e2e.sh started it again: Ready again, and it works.

Prints one line per check (tests/lib/checks.py) and appends it to --results.
The API server and its admin credentials come from E2E_SERVER, E2E_CA,
E2E_CERT and E2E_KEY (tests/lib/kube.py); PostgreSQL is queried through the
psql wrapper e2e.sh wrote in --workdir. Waits poll until a deadline.
"""

import argparse
import base64
import json
import os
import re
import signal
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from checks import Checks  # noqa: E402 (tests/lib is found through ROOT)
from kube import ApiError, Kube, load_yaml_documents, resource_path  # noqa: E402
from waits import Failure, wait_for  # noqa: E402

NAMESPACE = "tables"
SYSTEM_NAMESPACE = "database-table-system"
SECRET = "pg-app"
POSTGRES = "postgres.tables.example.cnpgi.io"
NAMING = "naming.tables.example.cnpgi.io"
API = "example.cnpgi.io/v1"
WEBHOOK = "database-table-operator"
RESERVED_MESSAGE = '"user" is a reserved word in SQL: choose another name'


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

    def table_path(self, name=None):
        return resource_path(API, "DatabaseTable", NAMESPACE, name)

    def table(self, name):
        return self.kube.get(self.table_path(name))

    def manifest(self, name, columns, **spec):
        spec = {
            "table": name,
            "columns": columns,
            "server": {"host": "127.0.0.1", "port": self.args.pg_port, "database": "app", "credentialsSecret": SECRET},
            "implementation": POSTGRES,
            **spec,
        }
        return {"apiVersion": API, "kind": "DatabaseTable", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}

    def update_spec(self, name, **spec):
        """A merge patch of the spec (lists are replaced whole); the object as stored."""
        return self.kube.merge_patch(self.table_path(name), {"spec": spec})

    def refused(self, request, field, message=""):
        """`request()` must be refused by the admission webhook, naming `field` (and `message`)."""
        try:
            request()
        except ApiError as e:
            text = str(e)
            if e.status >= 500 or field not in text or message not in text:
                raise Failure(f"refused, but not naming {field} {message!r}: {text}") from None
            return text
        raise Failure("admitted")

    def ready(self, name, generation=None):
        """Waits for phase Ready at the current (or given) generation; the object."""

        def probe():
            table = self.table(name)
            status = table.get("status") or {}
            want = generation or table["metadata"]["generation"]
            done = status.get("phase") == "Ready" and status.get("observedGeneration") == want == table["metadata"]["generation"]
            return done, table if done else {"generation": table["metadata"]["generation"], "status": status}

        return wait(f"{name}: phase Ready, observedGeneration = generation", probe)

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

    def wait_columns(self, table, what, condition):
        def probe():
            seen = self.columns(table)
            return condition(seen), seen

        return wait(f"PostgreSQL table {table}: {what}", probe)

    # --- the operator's log ---------------------------------------------------------------------

    def operator_log(self):
        with open(os.path.join(self.args.workdir, "logs", "operator.log"), encoding="utf-8", errors="replace") as f:
            return strip_ansi(f.read())

    # ============================================================================================

    def setup(self):
        def namespace_and_secret():
            self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            data = {"username": "app", "password": self.args.pg_password}
            secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE}}
            secret["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
            self.kube.apply(secret)

        def crd():
            (definition,) = load_yaml_documents(self.args.crd)  # YAML or JSON
            self.kube.apply(definition)
            path = resource_path("apiextensions.k8s.io/v1", "CustomResourceDefinition", name=definition["metadata"]["name"])

            def established():
                conditions = self.kube.get(path).get("status", {}).get("conditions", [])
                return any(c["type"] == "Established" and c["status"] == "True" for c in conditions), conditions

            wait("the CRD Established", established, timeout=30)

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
            expected = [
                (operator, "watch", "databasetables", None, "example.cnpgi.io", True),
                (operator, "patch", "databasetables/status", NAMESPACE, "example.cnpgi.io", True),
                (operator, "update", "databasetables", NAMESPACE, "example.cnpgi.io", False),
                (operator, "list", "services", SYSTEM_NAMESPACE, "", True),
                (operator, "get", "secrets", NAMESPACE, "", False),
                (plugin, "get", "secrets", NAMESPACE, "", True),
                (plugin, "list", "secrets", NAMESPACE, "", False),
                (plugin, "list", "databasetables", None, "example.cnpgi.io", False),
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
        self.check("set-up: namespace tables and the credentials Secret pg-app (username, password)", namespace_and_secret, setup=True)
        self.check("set-up: the CRD from database-table-operator --print-crd, Established", crd, setup=True)
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

        columns = [{"name": "id", "type": "bigint"}, {"name": "email"}]

        def admitted():
            stored = self.kube.create(self.manifest("users", columns))
            if stored["spec"]["columns"][1].get("type") != "text":
                raise Failure(f"email's type is not defaulted to text: {stored['spec']['columns']}")

        self.check("admission: DatabaseTable users (id bigint, email without a type) admitted, email's type defaulted to text", admitted, setup=True)
        self.check(
            "PostgreSQL: table users created with id bigint NOT NULL, email text NOT NULL",
            lambda: self.wait_columns("users", "id bigint NOT NULL, email text NOT NULL", lambda c: c == {"id": ("bigint", True), "email": ("text", True)}),
        )

        def status():
            table = self.ready("users")
            entries = {p["name"]: p for p in table["status"].get("plugins", [])}
            if POSTGRES not in entries:
                raise Failure(f"no status.plugins[] entry for {POSTGRES}: {table['status']}")
            # The plugin's own report of the sync that made this generation Ready.
            report = json.loads(entries[POSTGRES].get("status") or "{}")
            generation = table["metadata"]["generation"]
            wanted = {"generation": generation, "table": "app.public.users"}
            if {k: report.get(k) for k in wanted} != wanted or '"id" bigint NOT NULL' not in report.get("columns", []):
                raise Failure(f"the plugin's report is not this generation's sync of app.public.users: {report}")

        self.check(f"status: phase Ready, observedGeneration = generation, {POSTGRES}'s entry reports this generation's sync", status, setup=True)

        def added():
            self.update_spec("users", columns=[*columns, {"name": "created_at", "type": "timestamptz", "nullable": True}])
            self.wait_columns("users", "created_at timestamp with time zone, nullable", lambda c: c.get("created_at") == ("timestamp with time zone", False))

        self.check("a column added to the resource (created_at timestamptz, nullable) appears in PostgreSQL", added, setup=True)

        columns = [{"name": "id", "type": "bigint"}, {"name": "email", "type": "varchar(320)"}, {"name": "created_at", "type": "timestamptz", "nullable": True}]

        def changed():
            self.update_spec("users", columns=columns)
            self.wait_columns("users", "email character varying(320)", lambda c: c.get("email") == ("character varying(320)", True))

        self.check("a type change (email to varchar(320)) appears in PostgreSQL as character varying(320)", changed, setup=True)

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

        def invalid_type():
            before, stored = self.columns("users"), self.table("users")
            bad = [columns[0], {"name": "email", "type": "strng"}]
            self.refused(lambda: self.update_spec("users", columns=bad), "spec.columns[1].type")
            after = self.table("users")
            if after["metadata"]["generation"] != stored["metadata"]["generation"]:
                raise Failure(f"the refused change was stored (generation {after['metadata']['generation']})")
            if self.columns("users") != before:
                raise Failure(f"PostgreSQL changed: {before} -> {self.columns('users')}")

        self.check("an invalid type (strng) is refused at admission, naming spec.columns[1].type; nothing changes in PostgreSQL", invalid_type)

        def reserved():
            accounts = self.manifest("accounts", [{"name": "user", "type": "text"}, {"name": "id", "type": "bigint"}], policies=[NAMING])
            try:
                self.refused(lambda: self.kube.create(accounts), "spec.columns[0].name", RESERVED_MESSAGE)
            except Failure:
                self.kube.delete(self.table_path("accounts"))  # admitted: not there for the next check
                raise
            with open(os.path.join(self.args.workdir, "logs", "naming-plugin.log"), encoding="utf-8") as f:
                if "Operator/ValidateClusterCreate" not in f.read():
                    raise Failure("the Python plugin's log shows no ValidateClusterCreate call")

        self.check(f"the Python plugin: a table with policies [{NAMING}] and a column named user is refused, naming spec.columns[0].name", reserved)

        def allowed():
            self.kube.create(self.manifest("accounts", [{"name": "login", "type": "text"}], policies=[NAMING]))
            self.ready("accounts")
            self.wait_columns("accounts", "login text", lambda c: c == {"login": ("text", True)})

        self.check(f"the Python plugin: a table with policies [{NAMING}] and allowed names is admitted, Ready, created", allowed)

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
                return status.get("phase") == "Failed" and POSTGRES in (status.get("message") or ""), status

            wait(f"users: phase Failed with a message naming {POSTGRES}", probe, timeout=60)
            with open(self.state_file, "w", encoding="utf-8") as f:
                f.write("the status showed the plugin missing\n")

        self.check(f"{POSTGRES} stopped: the status of users becomes Failed, naming it, within 60 s (no change to the resource)", failed)

    def plugin_restarted(self):
        def rediscovered():
            def probe():
                lines = [line for line in self.operator_log().splitlines() if "plugin is routable" in line and POSTGRES in line]
                return len(lines) >= 2, f"{len(lines)} 'plugin is routable' line(s) naming it"

            wait("the operator's log shows it routable again", probe, timeout=30)

        def ready_again():
            if not os.path.exists(self.state_file):
                raise Failure("the status never showed the plugin missing (the check before): Ready proves nothing")
            self.ready("users")

        self.check(f"{POSTGRES} started again: the operator found it again (routable)", rediscovered, setup=True)
        self.check(f"{POSTGRES} started again: users is Ready again within 60 s", ready_again)

        def added():
            table = self.table("users")
            self.update_spec("users", columns=[*table["spec"]["columns"], {"name": "nickname", "type": "text", "nullable": True}])
            self.wait_columns("users", "nickname text, nullable", lambda c: c.get("nickname") == ("text", False))

        self.check(f"{POSTGRES} started again: a column added then (nickname text) appears in PostgreSQL", added)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=["setup", "main", "plugin-stopped", "plugin-restarted"])
    parser.add_argument("--results", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--crd", required=True)
    parser.add_argument("--webhook-url", required=True)
    parser.add_argument("--webhook-ca", required=True)
    parser.add_argument("--pg-port", type=int, required=True)
    parser.add_argument("--pg-password", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    e2e = E2E(args)
    getattr(e2e, args.phase.replace("-", "_"))()
    e2e.results.write("skipped\n" * e2e.checks.skipped)  # counted in e2e.sh's "not selected by CHECKS"
    sys.exit(1 if e2e.checks.failed else 0)


if __name__ == "__main__":
    main()
