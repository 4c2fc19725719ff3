#!/usr/bin/env python3
"""Scenario: `cnpgi-operator doctor` (issue 34) against the real cluster, right and then broken one way at a time.

Needs the cluster tests/realkube/up.sh makes (`task local-kind-deploy`: the
hello-world plugin in cnpgi-system; `task cnpg-kind-deploy`: the same plugin
registered with CloudNativePG in cnpg-system), and the plugin's image on its node:

    scenario_doctor.py --kubeconfig FILE --doctor target/debug/cnpgi-operator \\
        --plugin-image cnpg-i-hello-world:realkube

First the doctor passes (exit 0) on the plugin as `task local-kind-deploy` and
`task cnpg-kind-deploy` deployed it, and as `kubectl cnpgi doctor` (the binary
on PATH as kubectl-cnpgi). Then a copy of the plugin in a scratch namespace
(realkube-doctor), its certificates made with tests/lib/pki.py: a self-signed
server certificate the operator pins, a client certificate issued by a CA the
plugin trusts (its --client-cert is the CA's Secret); the doctor passes on it.
Each fault is then seeded by patching those objects, and the doctor must exit
1 naming the object and field at fault (read from --output json); the fault
is undone and the doctor passes again: the label missing, the label naming
another plugin, a port annotation that is not the Service's port, an
annotation missing, the client Secret missing, a key that is not the
certificate's, an expired client certificate, a server certificate for another
name, a client certificate from another CA, no ready endpoint, and a Cluster
that needs WAL archiving of a plugin that does not advertise it.
"""

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile

from realkube import Failure, Scenario, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pki

PLUGIN = "cnpg-i-hello-world.cloudnative-pg.io"
NS = "realkube-doctor"
SERVICE = "cnpg-i-hello-world"
LABEL = "cnpg.io/pluginName"
SELECTOR = {"app.kubernetes.io/name": "doctor-hello-world"}
SERVER_SECRET, CLIENT_SECRET, CLIENT_CA_SECRET = "doctor-server-tls", "doctor-client-tls", "doctor-client-ca"


def annotation(name):
    return f'metadata.annotations["{name}"]'


class Doctor(Scenario):
    title = "doctor"

    def __init__(self, args):
        super().__init__(args)
        self.dir = tempfile.mkdtemp(prefix="cnpgi-doctor-")
        self.pem = {}

    # -- the doctor

    def doctor(self, *args, binary=None, env=None):
        """Runs the doctor with --output json; (exit code, report)."""
        cmd = [binary or self.args.doctor, "doctor", "--kubeconfig", self.kubeconfig, "--output", "json", "--timeout-seconds", "10", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False, env=env)
        try:
            report = json.loads(proc.stdout)
        except json.JSONDecodeError as e:
            raise Failure(f"`{' '.join(cmd)}` exited {proc.returncode} without a JSON report ({e}): {proc.stdout[-400:]} {proc.stderr[-800:]}") from e
        return proc.returncode, report

    @staticmethod
    def lines(report):
        return "; ".join(
            f"{f['severity']} {f['check']} {f['object']['kind']}/{f['object'].get('namespace')}/{f['object']['name']} {f.get('field')}: {f['problem']}"
            for f in report["findings"]
        )

    def passes(self, *args, **kw):
        rc, report = self.doctor(*args, **kw)
        if rc != 0 or not report["passed"]:
            raise Failure(f"doctor exited {rc}: {self.lines(report)}")
        return report

    def names(self, check, kind, name, field, *args, contains=""):
        """The doctor exits 1 with an error or warning of `check` on
        `kind`/NS/`name` and `field` (whose problem contains `contains`)."""
        rc, report = self.doctor("-n", NS, *args)
        hits = [
            f
            for f in report["findings"]
            if f["severity"] in ("error", "warning")
            and f["check"] == check
            and f["object"]["kind"] == kind
            and f["object"]["name"] == name
            and f.get("field") == field
            and contains in f["problem"]
        ]
        if rc != 1 or report["passed"] or not hits:
            raise Failure(f"doctor exited {rc}, not 1 naming {check} on {kind}/{name} {field} ({contains!r}): {self.lines(report)}")
        return report

    def fault(self, seed, undo, check, kind, name, field, *args, contains="", settle=0):
        """Seeds a fault, waits (up to `settle` s) for the doctor to name it,
        undoes it and waits for the doctor to pass again."""
        try:
            seed()
            wait_for(f"the doctor names {check}", lambda: self.names(check, kind, name, field, *args, contains=contains), timeout=max(settle, 1), interval=2)
        finally:
            undo()
        wait_for("the doctor passes again", lambda: self.passes("-n", NS, PLUGIN), timeout=150, interval=3)

    # -- the scratch copy

    def secret(self, name, files):
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": name, "namespace": NS},
            "data": {k: base64.b64encode(v).decode() for k, v in files.items()},
        }

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def make_certificates(self):
        d = self.dir
        # 30 days: one expiring within 7 days is a warning, which fails the doctor.
        pki.ca(d, "client-ca", "/CN=doctor client CA", days=30)
        pki.ca(d, "other-ca", "/CN=doctor client CA", days=30)  # the same name, another key
        pki.leaf(d, "server", f"/CN={SERVICE}", f"DNS:{SERVICE}", "serverAuth", days=30)
        pki.leaf(d, "client", "/CN=doctor-client", "", "clientAuth", ca="client-ca", days=30)
        pki.leaf(d, "server-other-name", "/CN=other-plugin", "DNS:other-plugin", "serverAuth", days=30)
        pki.leaf(d, "client-other-ca", "/CN=doctor-client", "", "clientAuth", ca="other-ca", days=30)
        self.expired_leaf("client-expired", "client-ca")
        for name in ("client-ca", "server", "client", "server-other-name", "client-other-ca", "client-expired", "other-ca"):
            self.pem[name] = (self.read(os.path.join(d, name + ".crt")), self.read(os.path.join(d, name + ".key")))

    def expired_leaf(self, name, ca):
        """A client certificate of `ca` valid only in 2020 (`openssl ca` sets both dates)."""
        d = self.dir
        conf = os.path.join(d, "ca.cnf")
        with open(conf, "w", encoding="utf-8") as f:
            f.write(
                f"[ca]\ndefault_ca = doctor\n[doctor]\ndatabase = {d}/index.txt\nnew_certs_dir = {d}\nserial = {d}/serial\n"
                "default_md = sha256\npolicy = any\n[any]\ncommonName = supplied\n"
                "[ext]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\nextendedKeyUsage = clientAuth\n"
            )
        open(os.path.join(d, "index.txt"), "w", encoding="utf-8").close()
        with open(os.path.join(d, "serial"), "w", encoding="utf-8") as f:
            f.write("1000\n")
        key, csr, crt = (os.path.join(d, name + ext) for ext in (".key", ".csr", ".crt"))
        for cmd in (
            ["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-subj", "/CN=doctor-client", "-out", csr],
            ["openssl", "ca", "-batch", "-config", conf, "-cert", os.path.join(d, ca + ".crt"), "-keyfile", os.path.join(d, ca + ".key"),
             "-in", csr, "-out", crt, "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-extensions", "ext", "-notext"],
        ):  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise Failure(f"{' '.join(cmd[:2])}: {proc.stderr.strip()[-400:]}")

    def client_secret(self, name="client"):
        crt, key = self.pem[name]
        return self.secret(CLIENT_SECRET, {"tls.crt": crt, "tls.key": key})

    def server_secret(self, name="server"):
        crt, key = self.pem[name]
        return self.secret(SERVER_SECRET, {"tls.crt": crt, "tls.key": key})

    def service_object(self):
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": SERVICE,
                "namespace": NS,
                "labels": {LABEL: PLUGIN},
                "annotations": {
                    "cnpg.io/pluginClientSecret": CLIENT_SECRET,
                    "cnpg.io/pluginServerSecret": SERVER_SECRET,
                    "cnpg.io/pluginPort": "9090",
                },
            },
            "spec": {"selector": SELECTOR, "ports": [{"name": "grpc", "port": 9090, "targetPort": "grpc", "protocol": "TCP"}]},
        }

    def deployment_object(self):
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "doctor-hello-world", "namespace": NS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": SELECTOR},
                "template": {
                    "metadata": {"labels": SELECTOR},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [
                            {
                                "name": "plugin",
                                "image": self.args.plugin_image,
                                "imagePullPolicy": "IfNotPresent",
                                "args": [
                                    "plugin",
                                    "--server-address=:9090",
                                    "--server-cert=/server/tls.crt",
                                    "--server-key=/server/tls.key",
                                    "--client-cert=/client-ca/ca.crt",
                                ],
                                "ports": [{"name": "grpc", "containerPort": 9090, "protocol": "TCP"}],
                                "readinessProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 2},
                                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
                                "volumeMounts": [
                                    {"name": "server", "mountPath": "/server", "readOnly": True},
                                    {"name": "client-ca", "mountPath": "/client-ca", "readOnly": True},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "server", "secret": {"secretName": SERVER_SECRET}},
                            {"name": "client-ca", "secret": {"secretName": CLIENT_CA_SECRET, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        ],
                    },
                },
            },
        }

    def service_path(self):
        return f"/api/v1/namespaces/{NS}/services/{SERVICE}"

    def patch_service(self, metadata=None, spec=None):
        patch = {}
        if metadata:
            patch["metadata"] = metadata
        if spec:
            patch["spec"] = spec
        self.api.merge_patch(self.service_path(), patch)

    # -- checks

    def passes_on_the_deployed_plugins(self):
        report = self.passes("-n", "cnpgi-system", PLUGIN)
        plugin = report["plugins"][0]
        if plugin["readyEndpoints"] < 1 or not all(d["probed"] for d in plugin["dialled"]) or "TYPE_LIFECYCLE_SERVICE" not in plugin["services"]:
            raise Failure(f"cnpgi-system: {plugin}")
        if self.api.maybe_get("/api/v1/namespaces/cnpg-system/services/cnpg-i-hello-world"):
            self.passes("-n", "cnpg-system", PLUGIN)

    def passes_as_kubectl_plugin(self):
        bin_dir = os.path.join(self.dir, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        link = os.path.join(bin_dir, "kubectl-cnpgi")
        if not os.path.exists(link):
            os.symlink(os.path.abspath(self.args.doctor), link)
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
        # kubectl hands a plugin the arguments after its name (its own global flags
        # before the name would stop the plugin's lookup).
        cmd = [self.kubectl_bin, "cnpgi", "doctor", "--kubeconfig", self.kubeconfig, "-n", "cnpgi-system", PLUGIN]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False, env=env)
        if proc.returncode != 0 or "doctor: 0 error(s), 0 warning(s)" not in proc.stdout:
            raise Failure(f"`kubectl cnpgi doctor` exited {proc.returncode}: {proc.stdout[-600:]} {proc.stderr[-400:]}")

    def names_a_plugin_not_found(self):
        report = self.names("service.missing", "Service", "*", f'metadata.labels["{LABEL}"]', "no-such-plugin.example.com")
        del report

    def scratch_copy_deployed(self):
        self.namespace(NS)
        self.make_certificates()
        ca_crt, _ = self.pem["client-ca"]
        self.apply_objects(
            self.server_secret(),
            self.client_secret(),
            self.secret(CLIENT_CA_SECRET, {"ca.crt": ca_crt}),
            self.deployment_object(),
            self.service_object(),
        )
        self.rollout(NS, "doctor-hello-world")
        self.wait_endpoints(NS, SERVICE, "app.kubernetes.io/name=doctor-hello-world")

    def passes_on_the_scratch_copy(self):
        report = wait_for("the doctor passes on the scratch copy", lambda: self.passes("-n", NS, PLUGIN), timeout=60, interval=3)
        if report["plugins"][0]["readyEndpoints"] != 1 or not report["plugins"][0]["dialled"][0]["probed"]:
            raise Failure(f"{report['plugins']}")

    def missing_label(self):
        self.fault(
            lambda: self.patch_service(metadata={"labels": {LABEL: None}}),
            lambda: self.patch_service(metadata={"labels": {LABEL: PLUGIN}}),
            "service.missing", "Service", "*", f'metadata.labels["{LABEL}"]', PLUGIN,
            contains=f"{NS}/{SERVICE} (no {LABEL} label)",
        )  # fmt: skip

    def label_of_another_plugin(self):
        self.fault(
            lambda: self.patch_service(metadata={"labels": {LABEL: "other-plugin.example.com"}}),
            lambda: self.patch_service(metadata={"labels": {LABEL: PLUGIN}}),
            "dial.name", "Service", SERVICE, f'metadata.labels["{LABEL}"]',
            contains=PLUGIN,
        )  # fmt: skip

    def wrong_port(self):
        self.fault(
            lambda: self.patch_service(metadata={"annotations": {"cnpg.io/pluginPort": "9091"}}),
            lambda: self.patch_service(metadata={"annotations": {"cnpg.io/pluginPort": "9090"}}),
            "service.port", "Service", SERVICE, annotation("cnpg.io/pluginPort"), PLUGIN,
            contains="is not a port of the Service",
        )  # fmt: skip

    def missing_annotation(self):
        self.fault(
            lambda: self.patch_service(metadata={"annotations": {"cnpg.io/pluginServerSecret": None}}),
            lambda: self.patch_service(metadata={"annotations": {"cnpg.io/pluginServerSecret": SERVER_SECRET}}),
            "service.annotation", "Service", SERVICE, annotation("cnpg.io/pluginServerSecret"), PLUGIN,
        )  # fmt: skip

    def missing_secret(self):
        self.fault(
            lambda: self.api.delete(f"/api/v1/namespaces/{NS}/secrets/{CLIENT_SECRET}"),
            lambda: self.apply_objects(self.client_secret()),
            "secret.missing", "Service", SERVICE, annotation("cnpg.io/pluginClientSecret"), PLUGIN,
            contains="does not exist",
        )  # fmt: skip

    def foreign_key(self):
        crt, _ = self.pem["client"]
        _, other_key = self.pem["client-other-ca"]
        self.fault(
            lambda: self.apply_objects(self.secret(CLIENT_SECRET, {"tls.crt": crt, "tls.key": other_key})),
            lambda: self.apply_objects(self.client_secret()),
            "secret.key-pair", "Secret", CLIENT_SECRET, 'data["tls.key"]', PLUGIN,
        )  # fmt: skip

    def expired_certificate(self):
        self.fault(
            lambda: self.apply_objects(self.client_secret("client-expired")),
            lambda: self.apply_objects(self.client_secret()),
            "cert.dates", "Secret", CLIENT_SECRET, 'data["tls.crt"]', PLUGIN,
            contains="expired",
        )  # fmt: skip

    def server_certificate_for_another_name(self):
        self.fault(
            lambda: self.apply_objects(self.server_secret("server-other-name")),
            lambda: self.apply_objects(self.server_secret()),
            "cert.name", "Secret", SERVER_SECRET, 'data["tls.crt"]', PLUGIN,
            contains=f'not "{SERVICE}"',
        )  # fmt: skip

    def client_certificate_from_another_ca(self):
        def seeded():
            self.apply_objects(self.client_secret("client-other-ca"))
            # The plugin refuses it too, which the dial shows.
            self.names("dial.client-certificate", "Secret", CLIENT_SECRET, 'data["tls.crt"]', PLUGIN)

        self.fault(
            seeded,
            lambda: self.apply_objects(self.client_secret()),
            "cert.trust", "Secret", CLIENT_SECRET, 'data["tls.crt"]', PLUGIN,
            contains=CLIENT_CA_SECRET,
        )  # fmt: skip

    def no_ready_endpoint(self):
        self.fault(
            lambda: self.patch_service(spec={"selector": {"app.kubernetes.io/name": "nothing-here"}}),
            lambda: self.patch_service(spec={"selector": SELECTOR}),
            "service.endpoints", "Service", SERVICE, "spec.selector", PLUGIN,
            contains="selects no Pod", settle=60,
        )  # fmt: skip

    def cluster_needs_what_is_not_advertised(self):
        cluster = {
            "apiVersion": "cnpgi.io/v1",
            "kind": "Cluster",
            "metadata": {"name": "needs-wal", "namespace": NS},
            "spec": {"instances": 0, "plugins": [{"name": PLUGIN, "isWALArchiver": True}]},
        }
        self.fault(
            lambda: self.api.create(cluster),
            lambda: self.kubectl("-n", NS, "delete", "clusters.cnpgi.io/needs-wal", "--wait=true", timeout=120),
            "clusters.need", "Cluster.cnpgi.io", "needs-wal", "spec.plugins[0].isWALArchiver", PLUGIN,
            contains="TYPE_ARCHIVE_WAL",
        )  # fmt: skip

    def cleaned_up(self):
        self.kubectl("delete", "namespace", NS, "--wait=true", timeout=180)

    def explain_commands(self):
        return [
            ("-n", NS, "get", "all,secrets,endpointslices", "-o", "wide"),
            ("-n", NS, "logs", "deployment/doctor-hello-world", "--tail=30"),
        ]

    def run(self):
        steps = [
            ("the doctor passes on the hello-world plugin as the quick starts deployed it (cnpgi-system, cnpg-system)", self.passes_on_the_deployed_plugins),
            ("`kubectl cnpgi doctor` (the binary as kubectl-cnpgi on PATH) passes too", self.passes_as_kubectl_plugin),
            ("a plugin no Service labels is named, with the namespace searched", self.names_a_plugin_not_found),
            ("a copy of the plugin in a scratch namespace (its own certificates; client CA trusted)", self.scratch_copy_deployed),
            ("the doctor passes on the copy", self.passes_on_the_scratch_copy),
            ("the label missing: named, with the Service that looks like it", self.missing_label),
            ("the label naming another plugin: the label named, with the plugin's own name", self.label_of_another_plugin),
            ("a port annotation that is not the Service's port: the annotation named", self.wrong_port),
            ("the server Secret annotation missing: named", self.missing_annotation),
            ("the client Secret missing: the annotation naming it named", self.missing_secret),
            ("a key that is not the certificate's: the Secret's tls.key named", self.foreign_key),
            ("an expired client certificate: the Secret's tls.crt named", self.expired_certificate),
            ("a server certificate for another name: the Secret's tls.crt named", self.server_certificate_for_another_name),
            ("a client certificate from another CA: the Secret's tls.crt named, the plugin refusing it", self.client_certificate_from_another_ca),
            ("no ready endpoint: the Service's selector named", self.no_ready_endpoint),
            ("a Cluster naming the plugin its WAL archiver: the Cluster's isWALArchiver named", self.cluster_needs_what_is_not_advertised),
            ("the scratch namespace deleted", self.cleaned_up),
        ]
        return self.run_steps(steps, fatal=(self.scratch_copy_deployed, self.passes_on_the_scratch_copy))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--doctor", required=True, help="the cnpgi-operator binary to run (e.g. target/debug/cnpgi-operator)")
    p.add_argument("--plugin-image", required=True, help="the hello-world plugin's image, present on the nodes")
    args = p.parse_args()
    if not args.kubeconfig:
        sys.exit("scenario_doctor.py: no kubeconfig (--kubeconfig or KUBECONFIG)")
    doctor = Doctor(args)
    try:
        code = doctor.run()
    finally:
        # Its certificates and private keys, and the scratch copy's binary.
        shutil.rmtree(doctor.dir, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
