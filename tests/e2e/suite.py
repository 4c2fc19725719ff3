#!/usr/bin/env python3
"""End-to-end checks of cnpgi-operator against a real Kubernetes API server.

Run by tests/e2e/run.sh, once per API server (see there). As a user would:
the CRD from `cnpgi-operator crd`, the RBAC and webhook configurations from
manifests/operator, the operator running under its ServiceAccount's token,
the hello-world plugin over a socket directory and then behind a labelled
Service with mutual TLS, and the sample Clusters. Prints one line per check,
`ok <name>` or `FAIL <name>: <why>`, and appends them to --results.
"""

import argparse
import base64
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import pki
from checks import Checks
from kube import ApiError, Kube, load_yaml_documents, resource_path
from net import free_port, http_get
from waits import Failure, wait_for

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLUGIN = "cnpg-i-hello-world.cloudnative-pg.io"
# tests/hooks-plugin: its ReconcilerHooks answer what its parameters say.
HOOKS_PLUGIN = "hooks.e2e.cnpgi.io"
OPERATOR_NS = "cnpgi-system"
SA = "cnpgi-operator"
CLUSTER_LABEL = "cnpgi.io/cluster"
FIELD_MANAGER = "cnpgi-operator"
PLUGIN_SERVICE = "cnpg-i-hello-world"
LEASE = "cnpgi-operator-leader"
LEASE_SECONDS = 6


class Abort(Exception):
    """A set-up step failed: the remaining checks of this run cannot run."""


# --------------------------------------------------------------------------
# Processes: every one started here is stopped on any exit.


class Processes:
    def __init__(self, workdir):
        self.workdir = workdir
        self.running = {}

    def start(self, name, args, env=None):
        log_path = os.path.join(self.workdir, f"{name}.log")
        full_env = dict(os.environ)
        full_env.update(env or {})
        with open(log_path, "ab") as log:
            log.write(f"\n==== {' '.join(args)}\n".encode())
            log.flush()
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=full_env, stdin=subprocess.DEVNULL)
        self.running[name] = (proc, log_path)
        return proc

    def log(self, name):
        path = os.path.join(self.workdir, f"{name}.log")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def tail(self, name, lines=15):
        return "\n".join(self.log(name).splitlines()[-lines:])

    def alive(self, name):
        entry = self.running.get(name)
        return entry is not None and entry[0].poll() is None

    def stop(self, name, sig=signal.SIGTERM, timeout=15):
        entry = self.running.pop(name, None)
        if entry is None:
            return None
        proc = entry[0]
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def stop_all(self):
        for name in reversed(list(self.running)):
            self.stop(name)


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


# --------------------------------------------------------------------------


class Suite:
    def __init__(self, args):
        self.args = args
        self.label = args.label
        self.work = args.workdir
        os.makedirs(self.work, exist_ok=True)
        self.procs = Processes(self.work)
        self.admin = Kube.from_kubeconfig(os.environ["KUBECONFIG"])
        self.checks = Checks(f"e2e {self.label}", prefix=f"{self.label}: ", record=self.record)
        self.results = open(args.results, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole run)
        self.bin = os.path.join(ROOT, "target", "debug")
        self.plugin_dir = os.path.join(self.work, "plugins")
        os.makedirs(self.plugin_dir, exist_ok=True)
        self.ns = f"e2e-{self.label}-samples"
        self.ns_examples = f"e2e-{self.label}-examples"
        self.webhook_port = free_port()
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.plugin_port = free_port()
        self.operator_extra = []
        self.restricted = args.restricted

    # -- reporting

    def record(self, passed):
        """One line per counted check in the results file run.sh totals."""
        self.results.write(f"ok {self.label}\n" if passed else "FAIL\n")
        self.results.flush()

    def check(self, name, fn, setup=False):
        """Runs one named check; a set-up check (`setup`) runs even when
        CHECKS does not select it, and its failure aborts the run, as the
        checks after it need it."""
        passed = self.checks.check(name, fn, expected=(Failure, ApiError, Abort, pki.PkiError), setup=setup)
        if setup and not passed:
            raise Abort(f"{name} failed; the checks after it cannot run")
        return passed

    # -- helpers

    def cluster_path(self, name, ns=None, sub=None):
        return resource_path("cnpgi.io/v1", "Cluster", ns or self.ns, name, sub)

    def cluster(self, name, ns=None):
        return self.admin.get(self.cluster_path(name, ns))

    def pods(self, cluster, ns=None):
        items = self.admin.get(resource_path("v1", "Pod", ns or self.ns), labelSelector=f"{CLUSTER_LABEL}={cluster}")["items"]
        return sorted(items, key=lambda p: p["metadata"]["name"])

    def pod_names(self, cluster, ns=None):
        return [p["metadata"]["name"] for p in self.pods(cluster, ns)]

    def events(self, ns, name):
        items = self.admin.get(resource_path("events.k8s.io/v1", "Event", ns))["items"]
        return [e for e in items if e.get("regarding", {}).get("name") == name]

    def sample(self, path, ns, name=None):
        [obj] = load_yaml_documents(os.path.join(ROOT, path))
        obj["metadata"]["namespace"] = ns
        if name:
            obj["metadata"]["name"] = name
        return obj

    def condition(self, cluster, type_):
        for c in cluster.get("status", {}).get("conditions", []):
            if c["type"] == type_:
                return c
        return None

    def plugin_ready_metric(self, plugin=PLUGIN):
        try:
            _, text = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        except OSError:
            return None
        m = re.search(r'cnpgi_plugin_ready\{plugin="' + re.escape(plugin) + r'"\} (\d+)', text)
        return m and m.group(1)

    def hook_calls(self, cluster, since_generation=0):
        """The ReconcilerHooks calls the hooks plugin logged for `cluster`
        (in self.ns), oldest first."""
        try:
            with open(self.hooks_log, encoding="utf-8") as f:
                calls = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        key = f"{self.ns}/{cluster}"
        return [c for c in calls if c["cluster"] == key and (c["generation"] or 0) >= since_generation]

    # -- processes

    def start_socket_plugin(self):
        self.procs.start(
            "plugin-socket",
            [os.path.join(self.bin, "cnpg-i-hello-world"), "plugin", f"--plugin-path={self.plugin_dir}"],
        )

        def listening():
            self.fail_if_dead("plugin-socket")
            import socket

            with socket.socket(socket.AF_UNIX) as s:
                return s.connect_ex(os.path.join(self.plugin_dir, PLUGIN)) == 0

        wait_for("the plugin listens on its socket", listening, 10)

    def start_hooks_plugin(self):
        self.hooks_log = os.path.join(self.work, "hooks.log")
        self.procs.start(
            "plugin-hooks",
            [os.path.join(self.bin, "cnpgi-hooks-plugin"), "plugin", f"--plugin-path={self.plugin_dir}"],
            env={"CNPGI_HOOKS_LOG": self.hooks_log},
        )
        wait_for(
            f"{HOOKS_PLUGIN} ready in the operator",
            lambda: self.fail_if_dead("plugin-hooks") or self.plugin_ready_metric(HOOKS_PLUGIN) == "1",
            20,
        )

    def fail_if_dead(self, name):
        if not self.procs.alive(name):
            raise Abort(f"{name} exited: {self.procs.tail(name)}")
        return False

    def start_operator(self, extra=(), name="operator", webhook_port=None, metrics_port=None, health_port=None):
        webhook_port = webhook_port or self.webhook_port
        metrics_port = metrics_port or self.metrics_port
        health_port = health_port or self.health_port
        args = [
            os.path.join(self.bin, "cnpgi-operator"), "run",
            f"--namespace={OPERATOR_NS}",
            f"--webhook-address=127.0.0.1:{webhook_port}",
            f"--webhook-cert-dir={self.webhook_dir}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            f"--plugin-dir={self.plugin_dir}",
            "--probe-interval-seconds=1",
            # Short leader-election timings, so that a take-over is quick.
            f"--leader-election-lease-seconds={LEASE_SECONDS}",
            "--leader-election-renew-deadline-seconds=4",
            "--leader-election-retry-seconds=1",
            *extra,
        ]  # fmt: skip
        proc = self.procs.start(name, args, env={"KUBECONFIG": self.operator_kubeconfig, "RUST_LOG": "info"})

        def ready():
            self.fail_if_dead(name)
            try:
                return http_get(f"http://127.0.0.1:{health_port}/readyz")[0] == 200
            except OSError:
                return False

        wait_for(f"{name} answers /readyz", ready, 20)
        return proc

    # ----------------------------------------------------------------------
    # Set-up, as a user would.

    def setup_crd(self):
        out = subprocess.run([os.path.join(self.bin, "cnpgi-operator"), "crd"], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise Failure(f"cnpgi-operator crd exited {out.returncode}: {out.stderr}")
        import yaml

        crd = yaml.safe_load(out.stdout)
        self.admin.apply(crd)
        path = resource_path("apiextensions.k8s.io/v1", "CustomResourceDefinition", name=crd["metadata"]["name"])

        def established():
            got = self.admin.get(path)
            return any(c["type"] == "Established" and c["status"] == "True" for c in got.get("status", {}).get("conditions", []))

        wait_for("the CRD is Established", established, 20)
        self.crd_path = path

    def check_crd_description(self):
        got = self.admin.get(self.crd_path)
        description = got["spec"]["versions"][0]["schema"]["openAPIV3Schema"].get("description", "")
        if not description or "Auto-generated derived type" in description:
            raise Failure(f"the CRD's description is kube-derive's boilerplate: {description!r}")

    def setup_rbac(self):
        for file in ["namespace.yaml", "rbac.yaml"]:
            for obj in load_yaml_documents(os.path.join(ROOT, "manifests", "operator", file)):
                self.admin.apply(obj)
        self.operator_kubeconfig = self.admin.token_kubeconfig(OPERATOR_NS, SA, os.path.join(self.work, "operator.kubeconfig"))
        # The token is the ServiceAccount's, and is not allowed anything the RBAC does not grant.
        as_operator = Kube.from_kubeconfig(self.operator_kubeconfig)
        if as_operator.can("list", "secrets", "default"):
            raise Failure("the operator's token may list Secrets outside its namespace: not the shipped RBAC")

    def setup_webhooks(self):
        pki_dir = os.path.join(self.work, "webhook-pki")
        os.makedirs(pki_dir, exist_ok=True)
        ca_crt, _ = pki.ca(pki_dir, "ca", "/CN=cnpgi-e2e-webhook-ca")
        crt, key = pki.leaf(pki_dir, "tls", "/CN=cnpgi-webhook", "IP:127.0.0.1", "serverAuth", ca="ca")
        self.webhook_dir = os.path.join(self.work, "webhook-certs")
        os.makedirs(self.webhook_dir, exist_ok=True)
        os.replace(crt, os.path.join(self.webhook_dir, "tls.crt"))
        os.replace(key, os.path.join(self.webhook_dir, "tls.key"))
        ca_bundle = b64(read(ca_crt, "rb"))
        for obj in load_yaml_documents(os.path.join(ROOT, "manifests", "operator", "webhooks.yaml")):
            obj["metadata"].pop("annotations", None)
            for hook in obj["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.webhook_port}{path}", "caBundle": ca_bundle}
            self.admin.apply(obj)

    def setup_namespaces(self):
        for ns in [self.ns, self.ns_examples]:
            # The examples' namespace is never restricted, so that the
            # owner-reference rules are checked on their own there.
            restricted = self.restricted and ns == self.ns
            labels = {"pod-security.kubernetes.io/enforce": "restricted"} if restricted else {}
            self.admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})
            # ServiceAccount admission needs the `default` ServiceAccount for Pods.
            wait_for(
                f"the default ServiceAccount of {ns}",
                lambda ns=ns: self.admin.maybe_get(resource_path("v1", "ServiceAccount", ns, "default")),
                30,
            )

    def setup_processes(self):
        self.start_socket_plugin()
        self.start_operator()
        wait_for("the plugin is ready in the operator (cnpgi_plugin_ready 1)", lambda: self.plugin_ready_metric() == "1", 20)

    # ----------------------------------------------------------------------
    # Checks.

    def check_defaults(self):
        obj = self.sample("manifests/samples/cluster-example.yaml", self.ns)
        created = self.admin.create(obj)
        params = created["spec"]["plugins"][0].get("parameters", {})
        for key in ["labels", "annotations"]:
            if json.loads(params.get(key, "null")) != {"plugin-metadata": "default"}:
                raise Failure(f"parameter {key} not defaulted by the mutating webhook: {params}")
        if created["spec"].get("imageName") is None:
            raise Failure(f"spec.imageName not defaulted: {created['spec']}")
        obj = self.sample("manifests/samples/cluster-example-with-parameters.yaml", self.ns)
        created = self.admin.create(obj)
        if "first-label" not in created["spec"]["plugins"][0]["parameters"]["labels"]:
            raise Failure(f"the given labels were not kept: {created['spec']}")

    def check_mistake_denied(self):
        obj = self.sample("examples/hello-world/clusters/cluster-example-with-mistake.yaml", self.ns_examples)
        try:
            self.admin.create(obj)
        except ApiError as e:
            message = str(e)
            if "vcluster.cnpgi.io" in message and "spec.plugins[0].parameters.annotations" in message:
                return
            raise Failure(f"denied, but not by the validating webhook on the annotations: {message}") from e
        raise Failure("the Cluster with a mistake was accepted")

    def check_labels_change_denied(self):
        obj = self.sample("examples/hello-world/clusters/cluster-example-with-parameters.yaml", self.ns_examples)
        self.admin.create(obj)
        changed = self.sample("examples/hello-world/clusters/cluster-example-labels-changed.yaml", self.ns_examples)
        try:
            self.admin.merge_patch(self.cluster_path("cluster-example", self.ns_examples), {"spec": changed["spec"]})
        except ApiError as e:
            if "vcluster.cnpgi.io" in str(e) and "labels" in str(e):
                return
            raise Failure(f"denied, but not by the validating webhook on the labels: {e}") from e
        raise Failure("a labels change was accepted")

    def check_pods_patched(self):
        names = wait_for(
            "Pods cluster-example-1..3",
            lambda: self.pod_names("cluster-example") == ["cluster-example-1", "cluster-example-2", "cluster-example-3"],
            30,
        )
        assert names
        cluster = self.cluster("cluster-example")
        for pod in self.pods("cluster-example"):
            meta, name = pod["metadata"], pod["metadata"]["name"]
            if meta.get("labels", {}).get("plugin-metadata") != "default":
                raise Failure(f"{name}: no plugin label: {meta.get('labels')}")
            if meta.get("annotations", {}).get("plugin-metadata") != "default":
                raise Failure(f"{name}: no plugin annotation: {meta.get('annotations')}")
            init = {c["name"]: c for c in pod["spec"].get("initContainers", [])}
            if init.get("pauser", {}).get("restartPolicy") != "Always":
                raise Failure(f"{name}: no pauser sidecar: {pod['spec'].get('initContainers')}")
            owners = meta.get("ownerReferences", [])
            if not any(o["uid"] == cluster["metadata"]["uid"] and o.get("controller") for o in owners):
                raise Failure(f"{name}: not owned by its Cluster: {owners}")
        params = wait_for(
            "Pods cluster-example-params-1..2",
            lambda: len(self.pods("cluster-example-params")) == 2 and self.pods("cluster-example-params"),
            30,
        )
        for pod in params:
            labels = pod["metadata"].get("labels", {})
            if labels.get("first-label") != "first-label-value" or labels.get("second-label") != "second-label-value":
                raise Failure(f"{pod['metadata']['name']}: labels from the parameters missing: {labels}")
            if pod["metadata"].get("annotations", {}).get("first-annotation") != "first-annotation-value":
                raise Failure(f"{pod['metadata']['name']}: annotation missing: {pod['metadata'].get('annotations')}")

    def check_example_pods(self):
        wait_for(
            f"Pods of examples/hello-world's cluster-example in {self.ns_examples}",
            lambda: self.pod_names("cluster-example", self.ns_examples) == ["cluster-example-1", "cluster-example-2"],
            30,
        )
        for pod in self.pods("cluster-example", self.ns_examples):
            owners = pod["metadata"].get("ownerReferences", [])
            if not any(o.get("blockOwnerDeletion") for o in owners):
                raise Failure(f"{pod['metadata']['name']}: no blockOwnerDeletion owner reference: {owners}")

    def check_restricted_security(self):
        pods = self.pods("cluster-example")
        if not pods:
            raise Failure("no Pod of cluster-example to look at")
        for pod in pods:
            spec = pod["spec"]
            pod_sc = spec.get("securityContext", {})
            for c in spec["containers"] + spec.get("initContainers", []):
                sc = c.get("securityContext", {})
                problems = []
                if sc.get("allowPrivilegeEscalation") is not False:
                    problems.append("allowPrivilegeEscalation is not false")
                if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                    problems.append("capabilities do not drop ALL")
                if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
                    problems.append("runAsNonRoot is not true")
                seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}
                if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
                    problems.append("no RuntimeDefault seccompProfile")
                if problems:
                    raise Failure(f"{pod['metadata']['name']} container {c['name']}: {', '.join(problems)}")

    def check_status(self):
        def healthy_status():
            c = self.cluster("cluster-example")
            st = c.get("status", {})
            entry = next((p for p in st.get("pluginStatus", []) if p["name"] == PLUGIN), None)
            ready = self.condition(c, "PluginsReady")
            return entry and entry.get("status") and ready and ready["status"] == "True" and c

        c = wait_for("status.pluginStatus and PluginsReady of cluster-example", healthy_status, 30)
        st = c["status"]
        entry = next(p for p in st["pluginStatus"] if p["name"] == PLUGIN)
        if json.loads(entry["status"]) != {"enabled": True}:
            raise Failure(f"pluginStatus[].status is not the plugin's answer: {entry}")
        if not entry.get("version") or "TYPE_LIFECYCLE_SERVICE" not in entry.get("capabilities", []):
            raise Failure(f"pluginStatus[] lacks the version or capabilities: {entry}")
        if "TYPE_SET_STATUS_IN_CLUSTER" not in entry.get("operatorCapabilities", []):
            raise Failure(f"pluginStatus[] lacks the operator capabilities: {entry}")
        ready = self.condition(c, "Ready")
        # No kubelet: Pods stay Pending, so the Cluster waits for them.
        if not ready or ready["status"] != "False" or "0/3" not in ready["message"]:
            raise Failure(f"Ready condition should say 0/3 instances ready: {ready}")
        if st.get("phase") != "Creating instances":
            raise Failure(f"phase: {st.get('phase')!r}")

    def check_field_manager(self):
        c = self.cluster("cluster-example")
        managers = {(m.get("manager"), m.get("subresource", "")) for m in c["metadata"].get("managedFields", [])}
        if (FIELD_MANAGER, "status") not in managers:
            raise Failure(f"status is not written by field manager {FIELD_MANAGER}: managedFields {sorted(managers)}")
        pod = self.pods("cluster-example")[0]
        pod_managers = {m.get("manager") for m in pod["metadata"].get("managedFields", [])}
        if FIELD_MANAGER not in pod_managers:
            raise Failure(f"Pods are not created by field manager {FIELD_MANAGER}: {sorted(pod_managers)}")

    def check_scale(self):
        path = self.cluster_path("cluster-example")
        self.admin.merge_patch(path, {"spec": {"instances": 4}})
        wait_for("scale up to 4 Pods", lambda: len(self.pod_names("cluster-example")) == 4, 30)
        self.admin.merge_patch(path, {"spec": {"instances": 2}})
        wait_for(
            "scale down to cluster-example-1..2",
            lambda: self.pod_names("cluster-example") == ["cluster-example-1", "cluster-example-2"],
            30,
        )

    def check_roll(self):
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.pods("cluster-example-params")}
        if len(before) != 2:
            raise Failure(f"expected 2 Pods before the change, got {sorted(before)}")
        annotations = json.dumps({"first-annotation": "changed"})
        self.admin.merge_patch(
            self.cluster_path("cluster-example-params"),
            {
                "spec": {
                    "plugins": [
                        {
                            "name": PLUGIN,
                            "parameters": {
                                "labels": json.dumps({"first-label": "first-label-value", "second-label": "second-label-value"}),
                                "annotations": annotations,
                            },
                        }
                    ]
                }
            },
        )

        def rolled():
            pods = self.pods("cluster-example-params")
            return (
                len(pods) == 2
                and all(p["metadata"].get("annotations", {}).get("first-annotation") == "changed" for p in pods)
                and all(p["metadata"]["uid"] != before.get(p["metadata"]["name"]) for p in pods)
            )

        wait_for("both Pods rolled with the new annotation", rolled, 45)

    def check_reconciler_hooks(self):
        # CloudNativePG's semantics (protocol-services.md): Pre REQUEUE defers
        # the reconcile by the plugin's delay and writes nothing; Pre
        # TERMINATE ends it with no requeue; a hook error is a plugin failure
        # (phase, condition, Event, retried); Post REQUEUE sets the next
        # requeue; Post TERMINATE only stops the chain of hooks.
        self.start_hooks_plugin()
        name = "hooks"
        obj = self.sample("manifests/samples/cluster-example.yaml", self.ns, name)
        obj["spec"]["instances"] = 1

        def answers(**given):
            return {"spec": {"plugins": [{"name": HOOKS_PLUGIN, "parameters": given}]}}

        def gaps(calls):
            return [round(b["at"] - a["at"], 2) for a, b in itertools.pairwise(calls)]

        # 1. Pre asks for a requeue in 2 s: called again every 2 s, nothing else happens.
        obj["spec"]["plugins"] = answers(pre="requeue=2")["spec"]["plugins"]
        self.admin.create(obj)
        calls = wait_for("four Pre calls", lambda: (c := self.hook_calls(name)) and len(c) >= 4 and c, 30)
        if any(c["hook"] != "pre" or c["answer"] != "requeue=2" for c in calls):
            raise Failure(f"a Post hook ran, or another answer, after a Pre requeue: {calls}")
        # The first reconciles also follow the operator's own status write.
        if not all(1.5 <= g <= 4.5 for g in gaps(calls)[-2:]):
            raise Failure(f"Pre requeue=2 gaps between calls: {gaps(calls)} s")
        if self.pod_names(name):
            raise Failure(f"Pods were created while Pre asked for a requeue: {self.pod_names(name)}")

        # 2. Pre terminates: the reconcile ends with no requeue until the Cluster changes.
        generation = self.admin.merge_patch(self.cluster_path(name), answers(pre="terminate"))["metadata"]["generation"]
        wait_for("a Pre call answering terminate", lambda: self.hook_calls(name, generation), 20)
        time.sleep(9)
        calls = self.hook_calls(name, generation)
        if any(c["answer"] != "terminate" or c["hook"] != "pre" for c in calls):
            raise Failure(f"calls after Pre terminate: {calls}")
        # One call, or two when the first one's status write was seen again;
        # a requeue (even the operator's 5 s default) would keep calling.
        if len(calls) > 2 or time.time() - calls[-1]["at"] < 6:
            raise Failure(f"Pre terminate was requeued: calls at gaps {gaps(calls)} s, last {time.time() - calls[-1]['at']:.1f} s ago")
        if self.pod_names(name):
            raise Failure(f"Pods were created after Pre terminate: {self.pod_names(name)}")

        # 3. Pre fails: a plugin failure, reported where users look, retried.
        generation = self.admin.merge_patch(self.cluster_path(name), answers(pre="fail"))["metadata"]["generation"]

        def reported():
            c = self.cluster(name)
            st = c.get("status", {})
            cond = self.condition(c, "PluginsReady")
            return st.get("phase") == "Plugin error" and cond and cond["status"] == "False" and c

        c = wait_for("phase 'Plugin error' and PluginsReady False", reported, 20)
        reason = c["status"].get("phaseReason") or ""
        if HOOKS_PLUGIN not in reason or "told to fail" not in reason:
            raise Failure(f"phaseReason does not name the plugin and its message: {reason!r}")
        wait_for(
            f"a Warning Event PluginFailed on {name}",
            lambda: any(e.get("type") == "Warning" and e.get("reason") == "PluginFailed" for e in self.events(self.ns, name)),
            20,
        )
        key = re.escape(f"cluster={self.ns}/{name} ")
        wait_for(
            "the operator retries the failed hook in 15 s (CloudNativePG's delay)",
            lambda: re.search(key + r".*reason=\"?PluginFailed\"?.*retry_in_seconds=15", self.procs.log("operator")),
            10,
        )

        # 4. Pre continues, Post asks for a requeue in 2 s: the Pod is created,
        # Pre and Post alternate, and the next reconcile comes after 2 s
        # (the operator alone would wait 5 s for a Cluster still creating).
        generation = self.admin.merge_patch(self.cluster_path(name), answers(pre="continue", post="requeue=2"))["metadata"]["generation"]
        wait_for(f"{name}-1 created once Pre continues", lambda: self.pod_names(name) == [f"{name}-1"], 30)
        created = time.time()

        # From a second after the Pod's creation: the Pod's own watch events
        # start reconciles of their own at once (a run saw three Post calls
        # within 0.02 s of it), and it is the requeues after them that are timed.
        def settled_posts():
            posts = [c for c in self.hook_calls(name, generation) if c["hook"] == "post" and c["at"] > created + 1.0]
            return len(posts) >= 3 and posts

        posts = wait_for("three Post calls from a second after the Pod exists", settled_posts, 30)
        if not all(1.5 <= g <= 4.5 for g in gaps(posts)[-2:]):
            raise Failure(f"Post requeue=2 gaps between calls: {gaps(posts)} s")
        order = [c["hook"] for c in self.hook_calls(name, generation)]
        if order[:2] != ["pre", "post"] or any(a == b for a, b in itertools.pairwise(order)):
            raise Failure(f"Pre and Post do not alternate: {order}")
        c = self.cluster(name)
        entry = next((p for p in c["status"].get("pluginStatus", []) if p["name"] == HOOKS_PLUGIN), None)
        if not entry or "TYPE_RECONCILER_HOOKS" not in entry.get("capabilities", []):
            raise Failure(f"pluginStatus[] lacks the plugin or TYPE_RECONCILER_HOOKS: {entry}")
        if c["status"].get("phase") == "Plugin error":
            raise Failure(f"still 'Plugin error': {c['status'].get('phaseReason')}")

        # 5. Post terminates: it only stops the hooks; the reconcile is done
        # (a scale-up goes through, the status is written).
        patch = answers(pre="continue", post="terminate")
        patch["spec"]["instances"] = 2
        generation = self.admin.merge_patch(self.cluster_path(name), patch)["metadata"]["generation"]

        def scaled():
            c = self.cluster(name)
            cond = self.condition(c, "PluginsReady") or {}
            return (
                self.pod_names(name) == [f"{name}-1", f"{name}-2"]
                and cond.get("observedGeneration") == generation
                and any(x["hook"] == "post" and x["answer"] == "terminate" for x in self.hook_calls(name, generation))
            )

        wait_for(f"{name}-2 created and the status written with Post terminating", scaled, 30)
        self.admin.delete(self.cluster_path(name))
        self.procs.stop("plugin-hooks")

    def check_plugin_killed(self):
        self.procs.stop("plugin-socket", signal.SIGKILL)
        wait_for("the operator sees the plugin not ready", lambda: self.plugin_ready_metric() != "1", 20)
        # The webhook fails closed: a new Cluster using the plugin is refused.
        obj = self.sample("manifests/samples/cluster-example.yaml", self.ns, "cluster-while-down")
        try:
            self.admin.create(obj)
            raise Failure("a Cluster was admitted while its plugin was down")
        except ApiError as e:
            if PLUGIN not in str(e):
                raise Failure(f"refused, but the message does not name the plugin: {e}") from e
        # The reconciler reports the failure on the Cluster: a deleted Pod
        # cannot be re-created without the plugin.
        self.admin.delete(resource_path("v1", "Pod", self.ns, "cluster-example-2"))

        def reported():
            c = self.cluster("cluster-example")
            cond = self.condition(c, "PluginsReady")
            return c["status"].get("phase") == "Plugin error" and cond and cond["status"] == "False" and c

        c = wait_for("phase 'Plugin error' and PluginsReady False", reported, 30)
        if PLUGIN not in (c["status"].get("phaseReason") or ""):
            raise Failure(f"phaseReason does not name the plugin: {c['status'].get('phaseReason')!r}")
        wait_for(
            "a Warning Event PluginFailed on cluster-example",
            lambda: any(e.get("type") == "Warning" and e.get("reason") == "PluginFailed" for e in self.events(self.ns, "cluster-example")),
            20,
        )
        if self.pod_names("cluster-example") != ["cluster-example-1"]:
            raise Failure(f"a Pod was created without the plugin: {self.pod_names('cluster-example')}")
        # Restarted, the plugin is used again and the Cluster recovers.
        self.start_socket_plugin()
        wait_for(
            "cluster-example-2 re-created after the plugin restarted",
            lambda: self.pod_names("cluster-example") == ["cluster-example-1", "cluster-example-2"],
            40,
        )
        wait_for(
            "PluginsReady True again",
            lambda: (self.condition(self.cluster("cluster-example"), "PluginsReady") or {}).get("status") == "True",
            20,
        )

    def check_api_error_surfaces(self):
        # A Pod of the instance's name exists already (not the operator's):
        # creating the instance Pod is refused with AlreadyExists.
        squatter = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "squat-1", "namespace": self.ns},
            "spec": {
                "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    }
                ],
            },
        }
        self.admin.create(squatter)
        obj = self.sample("manifests/samples/cluster-example.yaml", self.ns, "squat")
        obj["spec"]["instances"] = 1
        self.admin.create(obj)

        def surfaced():
            c = self.cluster("squat")
            st = c.get("status", {})
            reason = st.get("phaseReason") or ""
            failing = [x for x in st.get("conditions", []) if x["status"] == "False" and "squat-1" in x["message"]]
            return "squat-1" in reason and failing and c

        c = wait_for("the refused Pod create in phaseReason and a condition", surfaced, 30)
        event = wait_for(
            "a Warning Event naming squat-1 on the Cluster",
            lambda: [e for e in self.events(self.ns, "squat") if e.get("type") == "Warning" and "squat-1" in e.get("note", "")],
            20,
        )
        del c, event
        # Retries back off exponentially: the gaps between attempts grow.
        time.sleep(8)
        key = re.escape(f"cluster={self.ns}/squat ")
        delays = [float(d) for d in re.findall(key + r".*?retry_in_seconds=(\d+)", self.procs.log("operator"))]
        if len(delays) < 3 or not all(b > a for a, b in itertools.pairwise(delays)):
            raise Failure(f"retry delays do not grow: {delays}")
        # Once the obstacle is gone, the Cluster recovers.
        self.admin.delete(resource_path("v1", "Pod", self.ns, "squat-1"))
        self.admin.merge_patch(self.cluster_path("squat"), {"metadata": {"annotations": {"e2e/poke": "1"}}})
        wait_for(
            "squat-1 created by the operator once the squatter is gone",
            lambda: self.pod_names("squat") == ["squat-1"],
            40,
        )

    def check_service_discovery(self):
        # The socket plugin goes away; the same plugin is now served over mTLS
        # behind a labelled Service (as manifests/hello-world), with
        # certificates like cert-manager's selfSigned issuer makes.
        socket_path = os.path.join(self.plugin_dir, PLUGIN)
        if self.procs.alive("plugin-socket"):
            self.procs.stop("plugin-socket")
            wait_for("the socket plugin removed its socket", lambda: not os.path.exists(socket_path), 10)
        elif os.path.exists(socket_path):
            os.unlink(socket_path)  # left by an earlier failed check
        # The operator restarts with the plugin Service: out of the cluster,
        # it dials the plugin on loopback.
        self.procs.stop("operator")
        self.tls_dir = os.path.join(self.work, "plugin-tls")
        os.makedirs(self.tls_dir, exist_ok=True)
        self.make_plugin_certs("1")
        self.apply_plugin_secrets("1")
        service = load_yaml_documents(os.path.join(ROOT, "manifests", "hello-world", "service.yaml"))[0]
        service["metadata"]["namespace"] = OPERATOR_NS
        self.admin.apply(service)
        self.start_tcp_plugin("1")
        self.start_operator([f"--dial-override={PLUGIN_SERVICE}.{OPERATOR_NS}.svc:9090=127.0.0.1:{self.plugin_port}"])
        wait_for("the Service's plugin is ready in the operator", lambda: self.plugin_ready_metric() == "1", 30)
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.pods("cluster-example")}
        self.admin.merge_patch(self.cluster_path("cluster-example"), {"spec": {"instances": 4}})
        wait_for(
            "cluster-example-4 created through the Service's plugin",
            lambda: len(self.pod_names("cluster-example")) == 4,
            30,
        )
        pod = next(p for p in self.pods("cluster-example") if p["metadata"]["name"] == "cluster-example-4")
        if not any(c["name"] == "pauser" for c in pod["spec"].get("initContainers", [])):
            raise Failure("the Pod made through the Service's plugin has no pauser sidecar")
        after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.pods("cluster-example")}
        if any(after.get(n) != uid for n, uid in before.items()):
            raise Failure("the restarted operator re-created existing Pods")

    def check_secret_rotation(self):
        if not self.procs.alive("plugin-tcp"):
            raise Failure("the plugin behind the Service is not running (see the check before)")
        self.make_plugin_certs("2")
        self.apply_plugin_secrets("2")
        # The plugin restarts with only the new certificates: the operator can
        # only reach it again if it took both rotated Secrets.
        self.procs.stop("plugin-tcp")
        wait_for("the operator sees the stopped plugin not ready", lambda: self.plugin_ready_metric() != "1", 20)
        self.start_tcp_plugin("2")
        wait_for(
            "the restarted plugin (new certificates only) is ready in the operator",
            lambda: self.plugin_ready_metric() == "1",
            30,
        )
        self.admin.merge_patch(self.cluster_path("cluster-example"), {"spec": {"instances": 5}})
        wait_for(
            "cluster-example-5 created after the Secrets rotated",
            lambda: len(self.pod_names("cluster-example")) == 5,
            40,
        )

    def check_deletion_gc(self):
        self.admin.delete(self.cluster_path("cluster-example"))
        wait_for(
            "the garbage collector deletes the Pods of the deleted Cluster",
            lambda: self.pod_names("cluster-example") == [],
            40,
        )

    def check_no_leaked_rbac_denials(self):
        log = self.procs.log("operator")
        denied = [line for line in log.splitlines() if 'forbidden: User "system:serviceaccount' in line or "cannot set blockOwnerDeletion" in line]
        if denied:
            raise Failure(f"the operator was refused by RBAC: {denied[0][:400]}")

    def check_health_and_metrics(self):
        status, _ = http_get(f"http://127.0.0.1:{self.health_port}/healthz")
        if status != 200:
            raise Failure(f"/healthz answered {status}")
        # Probes and metrics are on separate ports, as with kubebuilder.
        status, _ = http_get(f"http://127.0.0.1:{self.metrics_port}/healthz")
        if status != 404:
            raise Failure(f"/healthz on the metrics port answered {status}, not 404")
        _, text = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        for wanted in [
            f'cnpgi_plugin_ready{{plugin="{PLUGIN}"}} 1',
            "cnpgi_plugin_calls_total{",
            'leader_election_master_status{name="cnpgi-operator-leader"} ',
            "process_resident_memory_bytes ",
        ]:
            if wanted not in text:
                raise Failure(f"/metrics lacks {wanted!r}")

    def check_controller_runtime_metrics(self):
        """controller-runtime's metric names, after the webhook calls and
        reconciles of the checks before."""
        _, text = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        for wanted in [
            'controller_runtime_reconcile_total{controller="cluster",result=',
            'controller_runtime_reconcile_time_seconds_count{controller="cluster"} ',
            'controller_runtime_webhook_requests_total{webhook="/mutate-cluster",code="200"} ',
            'controller_runtime_webhook_requests_total{webhook="/validate-cluster",code="200"} ',
            'controller_runtime_webhook_latency_seconds_count{webhook="/validate-cluster"} ',
            'workqueue_depth{name="cluster"} ',
            # It created the Pods: it holds the Lease.
            'leader_election_master_status{name="cnpgi-operator-leader"} 1',
        ]:
            if wanted not in text:
                raise Failure(f"/metrics lacks {wanted!r}")

    def check_operator_stops(self):
        started = time.monotonic()
        code = self.procs.stop("operator", signal.SIGTERM, timeout=20)
        took = time.monotonic() - started
        if code != 0:
            raise Failure(f"cnpgi-operator exited {code} on SIGTERM: {self.procs.tail('operator', 5)}")
        if took > 15:
            raise Failure(f"cnpgi-operator took {took:.0f}s to stop on SIGTERM")

    def check_leader_election(self):
        """Two replicas against one API server: both serve, the holder of the
        Lease alone reconciles, and the other takes over when it is killed."""
        lease_path = resource_path("coordination.k8s.io/v1", "Lease", OPERATOR_NS, LEASE)
        leading = "leading: reconciling Clusters"

        def holder():
            lease = self.admin.maybe_get(lease_path) or {}
            return lease.get("spec", {}).get("holderIdentity") or ""

        # The plugin is still served behind its Service (check_service_discovery).
        dial = [f"--dial-override={PLUGIN_SERVICE}.{OPERATOR_NS}.svc:9090=127.0.0.1:{self.plugin_port}"]
        a = self.start_operator(dial, name="operator-a")
        wait_for("operator-a leads", lambda: leading in self.procs.log("operator-a"), 20)
        wait_for("the plugin is ready in operator-a", lambda: self.plugin_ready_metric() == "1", 20)
        b = self.start_operator(dial, name="operator-b", webhook_port=free_port(), metrics_port=free_port(), health_port=free_port())
        if not holder().endswith(f"_{a.pid}"):
            raise Failure(f"the Lease is held by {holder()!r}, not operator-a (pid {a.pid})")
        cluster = self.sample("manifests/samples/cluster-example.yaml", self.ns, "cluster-leader")
        self.admin.create(cluster)
        instances = cluster["spec"]["instances"]
        wait_for("the leader creates the Pods", lambda: len(self.pod_names("cluster-leader")) == instances, 30)
        time.sleep(LEASE_SECONDS / 2)
        log_b = self.procs.log("operator-b")
        if leading in log_b or "creating instance Pod" in log_b:
            raise Failure("operator-b reconciles while operator-a leads")
        if "waiting for leadership" not in log_b:
            raise Failure(f"operator-b is not a candidate: {self.procs.tail('operator-b', 5)}")

        self.procs.stop("operator-a", signal.SIGKILL)
        killed = time.monotonic()
        wait_for(
            "operator-b takes over",
            lambda: self.fail_if_dead("operator-b") or leading in self.procs.log("operator-b"),
            LEASE_SECONDS + 10,
        )
        took = time.monotonic() - killed
        print(f"  operator-b took over {took:.1f}s after operator-a was killed (lease {LEASE_SECONDS}s)", flush=True)
        if not holder().endswith(f"_{b.pid}"):
            raise Failure(f"the Lease is held by {holder()!r}, not operator-b (pid {b.pid})")
        # The new leader reconciles: a deleted Pod comes back (a Pod delete
        # does not go through the webhooks, which point at operator-a).
        self.admin.delete(resource_path("v1", "Pod", self.ns, "cluster-leader-1"))
        wait_for(
            "operator-b re-creates the deleted Pod",
            lambda: "creating instance Pod" in self.procs.log("operator-b") and "cluster-leader-1" in self.pod_names("cluster-leader"),
            30,
        )
        self.admin.delete(self.cluster_path("cluster-leader"))
        code = self.procs.stop("operator-b", signal.SIGTERM, timeout=20)
        if code != 0:
            raise Failure(f"operator-b exited {code} on SIGTERM: {self.procs.tail('operator-b', 5)}")
        if holder():
            raise Failure(f"operator-b did not release the Lease on SIGTERM (held by {holder()!r})")

    # -- plugin behind a Service

    def make_plugin_certs(self, generation):
        # Self-signed leaves, as cert-manager's selfSigned issuer makes them.
        base = os.path.join(self.tls_dir, generation)
        os.makedirs(base, exist_ok=True)
        pki.leaf(base, "server", f"/CN={PLUGIN_SERVICE}", f"DNS:{PLUGIN_SERVICE}", "serverAuth")
        pki.leaf(base, "client", f"/CN={PLUGIN_SERVICE}-client", "", "clientAuth")

    def apply_plugin_secrets(self, generation):
        base = os.path.join(self.tls_dir, generation)
        for which in ["server", "client"]:
            self.admin.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "kubernetes.io/tls",
                    "metadata": {"name": f"{PLUGIN_SERVICE}-{which}-tls", "namespace": OPERATOR_NS},
                    "data": {
                        "tls.crt": b64(read(os.path.join(base, f"{which}.crt"), "rb")),
                        "tls.key": b64(read(os.path.join(base, f"{which}.key"), "rb")),
                        "ca.crt": b64(read(os.path.join(base, f"{which}.crt"), "rb")),
                    },
                }
            )

    def start_tcp_plugin(self, generation):
        base = os.path.join(self.tls_dir, generation)
        self.procs.start(
            "plugin-tcp",
            [
                os.path.join(self.bin, "cnpg-i-hello-world"), "plugin",
                f"--server-address=127.0.0.1:{self.plugin_port}",
                f"--server-cert={base}/server.crt", f"--server-key={base}/server.key",
                f"--client-cert={base}/client.crt",
            ],
        )  # fmt: skip

        def listening():
            self.fail_if_dead("plugin-tcp")
            import socket

            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.plugin_port)) == 0

        wait_for("the TCP plugin listens", listening, 10)

    # ----------------------------------------------------------------------

    def run(self):
        try:
            self.check("the CRD from `cnpgi-operator crd` is accepted and Established", self.setup_crd, setup=True)
            self.check("the CRD describes the Cluster (not kube-derive's boilerplate)", self.check_crd_description)
            self.check("manifests/operator namespace and RBAC applied; a TokenRequest token for its ServiceAccount", self.setup_rbac, setup=True)
            self.check("webhook configurations from manifests/operator, re-pointed to 127.0.0.1 with a caBundle", self.setup_webhooks, setup=True)
            self.check(
                "test namespaces" + (f" ({self.ns} enforces restricted Pod Security)" if self.restricted else ""),
                self.setup_namespaces,
                setup=True,
            )
            self.check("cnpgi-operator run (ServiceAccount token) and the hello-world plugin on a socket are ready", self.setup_processes, setup=True)
            self.check("the operator's /healthz and /metrics (plugin ready, calls counted)", self.check_health_and_metrics)
            self.check("the mutating webhook defaults the plugin parameters of the samples", self.check_defaults, setup=True)
            self.check("the validating webhook denies cluster-example-with-mistake", self.check_mistake_denied)
            self.check("the validating webhook denies a labels change", self.check_labels_change_denied)
            pods_ok = self.check("instance Pods carry the plugin's labels, annotations and pauser sidecar", self.check_pods_patched)
            self.check("/metrics has controller-runtime's reconcile, workqueue and webhook metrics", self.check_controller_runtime_metrics)
            if not pods_ok:
                self.explain_missing_pods()
            self.check(
                "Pods of examples/hello-world's Cluster (namespace without Pod Security labels) owned with blockOwnerDeletion",
                self.check_example_pods,
            )
            self.check("instance Pods are restricted-compliant (postgres and the pauser sidecar)", self.check_restricted_security)
            self.check("status.pluginStatus, conditions and phase", self.check_status)
            self.check(f"writes carry field manager {FIELD_MANAGER} (status and Pods)", self.check_field_manager)
            self.check("scale up (3 -> 4) and down (4 -> 2)", self.check_scale)
            self.check("a parameter change rolls the Pods one by one", self.check_roll)
            if not self.restricted:
                # The hooks' semantics do not depend on the admission set-up: once is enough.
                self.check(
                    "ReconcilerHooks through a plugin: Pre requeue timing, terminate, error phase; Post requeue and terminate",
                    self.check_reconciler_hooks,
                )
            self.check("a killed plugin: webhook refuses, phase/condition/Warning Event, recovery on restart", self.check_plugin_killed)
            self.check("a refused Pod create surfaces as phaseReason, condition and Warning Event, with backoff", self.check_api_error_surfaces)
            self.check("Service discovery over mTLS (labelled Service, two TLS Secrets, --dial-override)", self.check_service_discovery)
            self.check("rotated plugin Secrets are picked up", self.check_secret_rotation)
            self.check("deleting a Cluster garbage-collects its Pods", self.check_deletion_gc)
            self.check("no request of the operator was refused by RBAC or owner-reference rules", self.check_no_leaked_rbac_denials)
            self.check("cnpgi-operator stops on SIGTERM and exits 0", self.check_operator_stops)
            self.check(
                "two replicas: both serve, only the Lease holder reconciles, the other takes over when it is killed",
                self.check_leader_election,
            )
        except Abort as e:
            self.checks.fail("aborted", str(e), always=True)
        finally:
            self.procs.stop_all()
            self.cleanup()
        if self.checks.failed:
            print(f"{self.label}: logs of the operator and plugins in {self.work}", flush=True)
        return self.checks.failed == 0

    def cleanup(self):
        """Deletes what this run created in shared places, so that another
        run against the same cluster (E2E_KUBECONFIG) starts clean."""
        paths = [resource_path("v1", "Service", OPERATOR_NS, PLUGIN_SERVICE)]
        paths += [resource_path("v1", "Secret", OPERATOR_NS, f"{PLUGIN_SERVICE}-{w}-tls") for w in ("server", "client")]
        paths += [resource_path("v1", "Namespace", name=ns) for ns in (self.ns, self.ns_examples)]
        for path in paths:
            try:
                self.admin.delete(path)
            except ApiError as e:
                print(f"  cleanup: {e}", flush=True)

    def explain_missing_pods(self):
        c = self.admin.maybe_get(self.cluster_path("cluster-example")) or {}
        print(f"  status of cluster-example: {json.dumps(c.get('status', {}))[:800]}", flush=True)
        lines = [line for line in self.procs.log("operator").splitlines() if "WARN" in line or "ERROR" in line]
        for line in lines[-3:]:
            print(f"  operator: {line[:600]}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--label", required=True, help="prefix of each check line, and of namespaces")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--results", required=True, help="file to append one line per check to")
    parser.add_argument("--restricted", action="store_true", help="label the test namespaces enforce=restricted")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    suite = Suite(args)
    try:
        ok = suite.run()
    finally:
        suite.procs.stop_all()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
