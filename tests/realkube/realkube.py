"""What the real-node scenarios of issue 25 share (tests/realkube/scenario_*.py).

A scenario is a list of named checks run against a kubeconfig, reported by
tests/lib/checks.py: each prints `ok   <name>` or `FAIL <name>: <why>`, and
the scenario ends with `scenario <title>: N passed, M failed` (exit 1 on any
failure). CHECKS=REGEX runs only the checks it names (the steps a failure of
which stops the scenario still run). KUBECTL names the kubectl binary.
"""

import contextlib
import json
import os
import re
import select
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from checks import Checks
from kube import ApiError, Kube
from waits import Failure, wait_for

# tests/lib's names the scenarios use, re-exported: they import only from this directory.
__all__ = ["ApiError", "Failure", "Kube", "Scenario", "delete_and_time", "wait_for"]


class Scenario:
    """Base of a scenario: reporting and the helpers every scenario uses."""

    title = "?"

    def __init__(self, args):
        self.args = args
        self.kubeconfig = args.kubeconfig
        self.api = Kube.from_kubeconfig(self.kubeconfig)
        self.kubectl_bin = os.environ.get("KUBECTL", "kubectl")
        self.checks = Checks(f"scenario {self.title}")

    # -- reporting

    def run_steps(self, steps, fatal=()):
        """Runs the (name, fn) steps in order; after a failed step of `fatal`
        the remaining ones are not run (counted as one more failure). Prints
        the summary line, explains a failure; returns the exit code."""
        for name, fn in steps:
            setup = fn in fatal
            if not self.checks.check(name, fn, expected=(Failure, ApiError), setup=setup) and setup:
                self.checks.fail(f"the remaining checks cannot run after '{name}'", always=True)
                break
        self.notes()
        if self.checks.failed:
            self.explain()
        return self.checks.summary()

    def notes(self):
        """Prints what the scenario measured beyond its checks (nothing here)."""

    def explain_commands(self):
        """kubectl argument lists whose output explains a failure."""
        return [("get", "pods", "-A", "-o", "wide")]

    def explain(self):
        for args in self.explain_commands():
            try:
                print(f"--- kubectl {' '.join(args)}\n{self.kubectl(*args)}", file=sys.stderr)
            except (Failure, subprocess.TimeoutExpired) as e:
                print(f"--- {e}", file=sys.stderr)

    # -- helpers

    def kubectl(self, *args, stdin=None, timeout=180):
        cmd = [self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args]
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise Failure(f"`kubectl {' '.join(args)}` exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-800:]}")
        return proc.stdout

    @contextlib.contextmanager
    def port_forward(self, ns, target, port):
        """`kubectl port-forward` to `target`'s port (`pod/NAME`, `svc/NAME`);
        yields the local port."""
        proc = subprocess.Popen(
            [self.kubectl_bin, "--kubeconfig", self.kubeconfig, "-n", ns, "port-forward", target, f":{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            # kubectl prints the local port at once, or fails: 30 s at most.
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            line = proc.stdout.readline() if ready else ""
            m = re.search(r"127\.0\.0\.1:(\d+) ->", line)
            if not m:
                raise Failure(f"kubectl port-forward to {target}: {line.strip() or 'no local port within 30 s'}")
            yield int(m.group(1))
        finally:
            proc.kill()
            proc.wait()

    def node(self, *args, timeout=120):
        """Runs a command on the node (--node-exec: `docker exec <node>`);
        returns its output."""
        node_exec = getattr(self.args, "node_exec", None)
        if not node_exec:
            raise Failure("this check runs commands on the node: give --node-exec")
        proc = subprocess.run([*shlex.split(node_exec), *args], capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise Failure(f"on the node, `{' '.join(args)}` exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}")
        return proc.stdout.strip()

    def apply_objects(self, *objects):
        """`kubectl apply` of objects given as dicts."""
        self.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objects))

    def pods(self, ns, selector):
        return self.api.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)["items"]

    def live_pods(self, ns, selector):
        return [p for p in self.pods(ns, selector) if not p["metadata"].get("deletionTimestamp")]

    @staticmethod
    def ready(pod):
        return pod["status"].get("phase") == "Running" and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))

    @staticmethod
    def condition(obj, type_):
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == type_:
                return c
        return None

    def hello_world_problems(self, pod, annotations):
        """What the hello-world plugin, with the labels first-label and
        second-label and these annotations, should have done to `pod` and did
        not, and any container of it not running (empty: all done)."""
        problems = []
        name = pod["metadata"]["name"]
        labels = pod["metadata"].get("labels", {})
        for k, v in {"first-label": "first-label-value", "second-label": "second-label-value"}.items():
            if labels.get(k) != v:
                problems.append(f"{name}: label {k}={labels.get(k)!r}")
        have = pod["metadata"].get("annotations", {})
        for k, v in annotations.items():
            if have.get(k) != v:
                problems.append(f"{name}: annotation {k}={have.get(k)!r}")
        sidecars = [c for c in pod["spec"].get("initContainers", []) if c["name"] == "pauser"]
        if not sidecars or sidecars[0].get("restartPolicy") != "Always":
            problems.append(f"{name}: no pauser sidecar (restartPolicy Always) in {pod['spec'].get('initContainers')}")
        if pod["status"].get("phase") != "Running":
            problems.append(f"{name}: phase {pod['status'].get('phase')}")
        # Native sidecars run; other init containers (CloudNativePG's
        # bootstrap-controller) have completed.
        sidecar_names = {c["name"] for c in pod["spec"].get("initContainers", []) if c.get("restartPolicy") == "Always"}
        statuses = [s for s in pod["status"].get("initContainerStatuses", []) if s["name"] in sidecar_names]
        for status in statuses + pod["status"].get("containerStatuses", []):
            if "running" not in status.get("state", {}):
                problems.append(f"{name}: container {status['name']} is {status.get('state')}")
        if not self.ready(pod):
            problems.append(f"{name}: not Ready")
        return problems

    def namespace(self, name, restricted=True):
        labels = {"pod-security.kubernetes.io/enforce": "restricted"} if restricted else {}
        self.apply_objects({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})

    def certificates_ready(self, ns, names, secrets):
        """cert-manager issued the Certificates `names` of `ns`, and the
        kubernetes.io/tls Secrets `secrets` hold a certificate and a key."""

        def probe():
            certs = self.api.get(f"/apis/cert-manager.io/v1/namespaces/{ns}/certificates")["items"]
            have = {
                c["metadata"]["name"]: any(x["type"] == "Ready" and x["status"] == "True" for x in c.get("status", {}).get("conditions", [])) for c in certs
            }
            if not set(names) <= {n for n, ok in have.items() if ok}:
                raise Failure(f"Certificates and readiness: {have}")
            for secret in secrets:
                data = self.api.get(f"/api/v1/namespaces/{ns}/secrets/{secret}")["data"]
                if not data.get("tls.crt") or not data.get("tls.key"):
                    raise Failure(f"Secret {secret} has no tls.crt/tls.key")
            return True

        wait_for("cert-manager issues the Certificates", probe, timeout=90, interval=1)

    def rollout(self, ns, deployment, timeout=180):
        self.kubectl("-n", ns, "rollout", "status", f"deployment/{deployment}", f"--timeout={timeout}s", timeout=timeout + 20)

    def wait_endpoints(self, ns, service, selector, timeout=60):
        """The Service's EndpointSlices list exactly its Ready Pods (what the
        API server and the operators reach through it)."""

        def probe():
            pods = {p["status"]["podIP"] for p in self.live_pods(ns, selector) if self.ready(p)}
            slices = self.api.get(
                f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                labelSelector=f"kubernetes.io/service-name={service}",
            )["items"]
            ready = {a for s in slices for e in s.get("endpoints") or [] if e.get("conditions", {}).get("ready") for a in e["addresses"]}
            if not pods or ready != pods:
                raise Failure(f"Ready Pods {sorted(pods)}, ready endpoints {sorted(ready)}")
            return True

        wait_for(f"the endpoints of Service {service}", probe, timeout=timeout, interval=1)

    def events(self, ns, kind, name):
        return self.api.get(f"/api/v1/namespaces/{ns}/events", fieldSelector=f"involvedObject.kind={kind},involvedObject.name={name}")["items"]

    def psql(self, ns, pod, sql, container="postgres", database="postgres"):
        """`psql` in the Pod's container, on its local socket; the output of -At."""
        return self.kubectl(
            "-n", ns, "exec", pod, "-c", container, "--",
            "psql", "-h", os.environ.get("RK_PGHOST", "/controller/run"), "-U", "postgres", "-d", database,
            "-v", "ON_ERROR_STOP=1", "-Atc", sql,
        ).strip()  # fmt: skip


def delete_and_time(api, ns, pod, timeout=90):
    """Deletes the Pod gracefully and waits until it is gone (or replaced by
    a Pod of another uid); returns the seconds it took."""
    old = api.get(f"/api/v1/namespaces/{ns}/pods/{pod}")["metadata"]["uid"]
    started = time.monotonic()
    api.delete(f"/api/v1/namespaces/{ns}/pods/{pod}")

    def gone():
        now = api.maybe_get(f"/api/v1/namespaces/{ns}/pods/{pod}")
        return now is None or now["metadata"]["uid"] != old

    wait_for(f"{pod} stops", gone, timeout=timeout, interval=0.5)
    return old, time.monotonic() - started
