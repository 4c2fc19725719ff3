#!/usr/bin/env python3
"""Scenario 1 of issue 25: cnpgi-operator as users install it, on a real cluster.

Needs only a kubeconfig (the local node of tests/realkube/up.sh, or kind) whose
cluster has cert-manager and cluster DNS, and whose nodes already hold the
images (no pull: IfNotPresent):

    scenario_operator.py --manifest manifest.yaml --postgres-image localhost/postgresql:15

`manifest.yaml` is `task manifest` with the images built from the Dockerfile;
it is applied as is (`kubectl apply --server-side`). Then, one named check
each, `ok <name>` or `FAIL <name>: <why>`, and `N passed, M failed` at the end
(exit 1 on any failure): cert-manager's Certificates and the injected webhook
caBundle, the operator's 2 replicas with one leader, the hello-world plugin,
the webhooks called by the API server through their Service, a Cluster's
instance Pods Running with the plugin's labels, annotations and running
`pauser` sidecar, PostgreSQL answering and the plugin's Service name resolving
inside them, a killed Pod recreated patched, a rolled plugin Deployment still
serving the evaluation of a parameter change, and a deleted leader Pod
replaced by the other replica. Then two faults (issue 32): the leader deleted
in the middle of a rolling update, and the network from the operator to the
plugin cut for a minute (iptables on the node, --node-exec). KUBECTL names
the kubectl binary.
"""

import argparse
import json
import os
import sys
import time

import realkube
import yaml
from realkube import ApiError, Failure, wait_for

PLUGIN = "cnpg-i-hello-world.cloudnative-pg.io"
OPERATOR_NS = "cnpgi-system"
LEASE = "cnpgi-operator-leader"
NS = "realkube-s1"
CLUSTER = "pg"
CLUSTER_LABEL = "cnpgi.io/cluster"
# The Pods' annotations from the leader-failover fault on (the network cut expects them).
ROLLED_ACROSS_A_FAILOVER = {"first-annotation": "rolled-across-a-failover"}


class Scenario(realkube.Scenario):
    title = "operator"

    def cluster(self):
        return self.api.get(f"/apis/cnpgi.io/v1/namespaces/{NS}/clusters/{CLUSTER}")

    def lease_holder(self):
        """The Pod holding the leader Lease (its identity is `<Pod name>_<pid>`)."""
        lease = self.api.get(f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NS}/leases/{LEASE}")
        holder = lease["spec"].get("holderIdentity")
        return holder.rsplit("_", 1)[0] if holder else None

    def operator_pods(self):
        return [p for p in self.pods(OPERATOR_NS, "app.kubernetes.io/name=cnpgi-operator") if not p["metadata"].get("deletionTimestamp")]

    def instance_pods(self):
        return [p for p in self.pods(NS, f"{CLUSTER_LABEL}={CLUSTER}") if not p["metadata"].get("deletionTimestamp")]

    def wait_instances(self, annotations, what, timeout=180, exclude_uids=()):
        def probe():
            pods = self.instance_pods()
            if len(pods) != 2:
                raise Failure(f"{len(pods)} instance Pods: {[p['metadata']['name'] for p in pods]}")
            problems = [p for pod in pods for p in self.hello_world_problems(pod, annotations)]
            problems += [f"{p['metadata']['name']} is still the old Pod" for p in pods if p["metadata"]["uid"] in exclude_uids]
            if problems:
                raise Failure("; ".join(problems))
            return pods

        return wait_for(what, probe, timeout=timeout, interval=2)

    # -- checks

    def apply_manifest(self):
        self.kubectl("apply", "--server-side", "-f", self.args.manifest)

    def certificates(self):
        self.certificates_ready(
            OPERATOR_NS,
            ["cnpgi-webhook", "cnpg-i-hello-world-server", "cnpg-i-hello-world-client"],
            ["cnpgi-webhook-tls", "cnpg-i-hello-world-server-tls", "cnpg-i-hello-world-client-tls"],
        )

    def ca_injected(self):
        def probe():
            for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
                config = self.api.get(f"/apis/admissionregistration.k8s.io/v1/{kind}/cnpgi-operator")
                for hook in config["webhooks"]:
                    if not hook["clientConfig"].get("caBundle"):
                        raise Failure(f"{kind}/cnpgi-operator {hook['name']} has no caBundle yet")
            return True

        wait_for("cainjector fills the webhooks' caBundle", probe, timeout=60, interval=1)

    def operator_ready(self):
        self.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/cnpgi-operator", "--timeout=180s")
        pods = self.operator_pods()
        ready = [p["metadata"]["name"] for p in pods if self.ready(p)]
        if len(ready) != 2:
            raise Failure(f"{len(ready)} Ready operator Pods: {ready}")
        self.wait_endpoints(OPERATOR_NS, "cnpgi-webhook", "app.kubernetes.io/name=cnpgi-operator")

    def one_leader(self):
        names = {p["metadata"]["name"] for p in self.operator_pods()}
        holder = wait_for("the leader Lease is held", self.lease_holder, timeout=60, interval=1)
        if holder not in names:
            raise Failure(f"Lease {LEASE} is held by {holder!r}, not one of the operator Pods {sorted(names)}")

    def plugin_ready(self):
        self.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/cnpg-i-hello-world", "--timeout=180s")
        self.wait_plugin_endpoints()

    def wait_plugin_endpoints(self):
        self.wait_endpoints(OPERATOR_NS, "cnpg-i-hello-world", "app.kubernetes.io/name=cnpg-i-hello-world")

    def admitted(self, what, call):
        """Runs an API call that goes through the operator's webhooks, again
        for up to 30 s while the API server cannot reach the webhook (the
        moment between the operator's Ready Pods and kube-proxy's rules for
        its Service); returns its result or raises its last ApiError. Each
        retry is printed. A plugin that is not routable yet is not retried
        here: the operator waits for a plugin that is arriving
        (plugin_arriving checks it)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return call()
            except ApiError as e:
                # The webhook's Service not routed yet.
                transient = "failed calling webhook" in str(e) and "connection refused" in str(e)
                if not transient or time.monotonic() > deadline:
                    raise
                print(f"  ({what}: {str(e)[:160]}...; again in 2 s)", flush=True)
                time.sleep(2)

    def test_namespace(self):
        self.namespace(NS)

    def cluster_object(self, annotations):
        return {
            "apiVersion": "cnpgi.io/v1",
            "kind": "Cluster",
            "metadata": {"name": CLUSTER, "namespace": NS},
            "spec": {
                "instances": 2,
                "imageName": self.args.postgres_image,
                "plugins": [
                    {
                        "name": PLUGIN,
                        "parameters": {
                            "labels": json.dumps({"first-label": "first-label-value", "second-label": "second-label-value"}),
                            "annotations": json.dumps(annotations),
                        },
                    }
                ],
            },
        }

    def webhook_denies_mistake(self):
        obj = self.cluster_object({"a": "b"})
        obj["metadata"]["name"] = "with-mistake"
        obj["spec"]["plugins"][0]["parameters"]["annotations"] = '{"first-annotation": "x", this is a mistake}'
        try:
            self.admitted("invalid Cluster", lambda: self.api.create(obj))
        except ApiError as e:
            if "vcluster.cnpgi.io" in str(e) and "spec.plugins[0].parameters.annotations" in str(e):
                return
            raise Failure(f"refused, but not by the validating webhook on the annotations: {e}") from e
        raise Failure("a Cluster with invalid annotations JSON was accepted: the API server did not call the webhook")

    def webhook_defaults(self):
        obj = self.cluster_object({"first-annotation": "first-annotation-value"})
        del obj["spec"]["plugins"][0]["parameters"]
        obj["metadata"]["name"] = "defaulted"
        created = self.admitted("dry-run Cluster", lambda: self.api.create(obj, dry_run=True))
        params = created["spec"]["plugins"][0].get("parameters") or {}
        if "plugin-metadata" not in params.get("labels", ""):
            raise Failure(f"the mutating webhook did not default the plugin's parameters: {params}")

    def plugin_documents(self):
        """The hello-world plugin's Deployment and Service from manifest.yaml."""
        with open(self.args.manifest) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        wanted = [d for d in docs if d["kind"] in ("Deployment", "Service") and d["metadata"]["name"] == "cnpg-i-hello-world"]
        if len(wanted) != 2:
            raise Failure(f"manifest.yaml has {len(wanted)} Deployment/Service named cnpg-i-hello-world, not 2")
        return wanted

    def plugin_arriving(self):
        """A user installs a plugin and applies a Cluster in the same second:
        the operator, which discovers the plugin's Service before its Pod
        answers, waits for it instead of refusing the Cluster. Then
        --timed-done FILE is created (scenarios that load the node start)."""
        try:
            self.arrive()
        finally:
            if self.args.timed_done:
                open(self.args.timed_done, "a").close()

    def arrive(self):
        documents = self.plugin_documents()
        self.kubectl("-n", OPERATOR_NS, "delete", "deployment/cnpg-i-hello-world", "service/cnpg-i-hello-world", "--wait=true")
        wait_for("the plugin's Pods are gone", lambda: not self.pods(OPERATOR_NS, "app.kubernetes.io/name=cnpg-i-hello-world"), timeout=90, interval=1)
        obj = self.cluster_object({"first-annotation": "first-annotation-value"})
        del obj["spec"]["plugins"][0]["parameters"]
        obj["metadata"]["name"] = "arriving"

        def forgotten():
            try:
                self.admitted("dry-run Cluster, plugin removed", lambda: self.api.create(obj, dry_run=True))
            except ApiError as e:
                return "is not registered" in str(e)
            return False

        wait_for("the operator forgot the removed plugin (a Cluster enabling it is refused as not registered)", forgotten, timeout=60, interval=1)
        self.apply_objects(*documents)
        started = time.monotonic()
        try:
            created = self.admitted("dry-run Cluster, plugin just installed", lambda: self.api.create(obj, dry_run=True))
        except ApiError as e:
            raise Failure(f"a Cluster applied right after installing the plugin was refused ({time.monotonic() - started:.1f} s later): {e}") from e
        params = created["spec"]["plugins"][0].get("parameters") or {}
        if "plugin-metadata" not in params.get("labels", ""):
            raise Failure(f"admitted without the plugin's defaults: {params}")
        print(f"  (admitted {time.monotonic() - started:.1f} s after the plugin's Deployment and Service were applied)", flush=True)
        self.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/cnpg-i-hello-world", "--timeout=180s")
        self.wait_plugin_endpoints()

    def cluster_created(self):
        self.admitted("Cluster", lambda: self.api.create(self.cluster_object({"first-annotation": "first-annotation-value"})))

    def instances_running(self):
        self.wait_instances({"first-annotation": "first-annotation-value"}, "2 instance Pods Running, Ready and patched", timeout=240)

    def postgres_answers(self):
        for pod in self.instance_pods():
            out = self.kubectl(
                "-n", NS, "exec", pod["metadata"]["name"], "-c", "postgres", "--",
                "psql", "-h", "/tmp", "-U", "postgres", "-Atc", "select current_setting('server_version_num')::int / 10000",
            )  # fmt: skip
            if out.strip() != "15":
                raise Failure(f"psql in {pod['metadata']['name']} answered {out.strip()!r}, not 15")

    def dns_resolves(self):
        pod = self.instance_pods()[0]["metadata"]["name"]
        for name in ("cnpg-i-hello-world.cnpgi-system.svc", "kubernetes.default.svc.cluster.local"):
            out = self.kubectl("-n", NS, "exec", pod, "-c", "postgres", "--", "getent", "hosts", name)
            if not out.strip():
                raise Failure(f"{name} does not resolve in {pod}")

    def cluster_status(self):
        def probe():
            status = self.cluster().get("status") or {}
            entries = [s for s in status.get("pluginStatus", []) if s.get("name") == PLUGIN]
            if status.get("readyInstances") != 2 or not entries or not entries[0].get("capabilities"):
                raise Failure(f"readyInstances {status.get('readyInstances')}, pluginStatus {status.get('pluginStatus')}, phase {status.get('phase')}")
            return True

        wait_for("the Cluster's status", probe, timeout=60, interval=2)

    def killed_pod_recreated(self):
        victim = f"{CLUSTER}-1"
        old = self.api.get(f"/api/v1/namespaces/{NS}/pods/{victim}")["metadata"]["uid"]
        # A graceful delete: the kubelet sends SIGTERM, PostgreSQL (the
        # container's main process) and the sidecar must stop well before the
        # 30 s grace period ends in SIGKILL.
        started = time.monotonic()
        self.api.delete(f"/api/v1/namespaces/{NS}/pods/{victim}")

        def gone():
            pod = self.api.maybe_get(f"/api/v1/namespaces/{NS}/pods/{victim}")
            return pod is None or pod["metadata"]["uid"] != old

        wait_for(f"{victim} stops on SIGTERM", gone, timeout=45, interval=0.5)
        took = time.monotonic() - started
        if took > 20:
            raise Failure(f"{victim} took {took:.0f} s to stop: SIGTERM did not stop its containers (killed at the grace period)")
        self.wait_instances({"first-annotation": "first-annotation-value"}, f"{victim} recreated, patched and Running", exclude_uids={old})

    def plugin_rolled(self):
        before = {p["metadata"]["uid"] for p in self.pods(OPERATOR_NS, "app.kubernetes.io/name=cnpg-i-hello-world")}
        self.kubectl("-n", OPERATOR_NS, "rollout", "restart", "deployment/cnpg-i-hello-world")
        self.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/cnpg-i-hello-world", "--timeout=180s")

        def rolled():
            pods = [p for p in self.pods(OPERATOR_NS, "app.kubernetes.io/name=cnpg-i-hello-world") if not p["metadata"].get("deletionTimestamp")]
            if len(pods) != 1 or pods[0]["metadata"]["uid"] in before or not self.ready(pods[0]):
                raise Failure(f"plugin Pods {[(p['metadata']['name'], p['status'].get('phase')) for p in pods]}")
            return True

        wait_for("the plugin Deployment rolls to a new Ready Pod, the old one gone", rolled, timeout=60, interval=1)
        self.wait_plugin_endpoints()
        # A parameter change: every Pod is evaluated by the new plugin Pod and rolled.
        old = {p["metadata"]["uid"] for p in self.instance_pods()}
        annotations = {"first-annotation": "after-the-plugin-rolled"}
        self.set_annotations(annotations)
        self.wait_instances(annotations, "Pods evaluated by the rolled plugin and rolled with the new annotation", timeout=240, exclude_uids=old)

    def leader_failover(self):
        holder = self.lease_holder()
        pods = {p["metadata"]["name"] for p in self.operator_pods()}
        if holder not in pods:
            raise Failure(f"the Lease holder {holder!r} is not an operator Pod {sorted(pods)}")
        (other,) = pods - {holder}
        self.api.delete(f"/api/v1/namespaces/{OPERATOR_NS}/pods/{holder}")

        # The deleted leader releases the Lease on SIGTERM; the replica that was
        # waiting takes it, unless the Deployment's replacement Pod is faster:
        # either way a live replica other than the deleted one leads.
        def new_leader():
            now = self.lease_holder()
            live = {p["metadata"]["name"] for p in self.operator_pods()}
            return now if now and now != holder and now in live else None

        now = wait_for(f"a replica other than the deleted {holder} takes the Lease", new_leader, timeout=60, interval=1)
        print(f"  (the Lease moved from {holder} to {now}{', the replica that was waiting' if now == other else ', the replacement Pod'})", flush=True)
        # The new leader reconciles: a deleted instance Pod comes back patched.
        victim = f"{CLUSTER}-2"
        old = self.api.get(f"/api/v1/namespaces/{NS}/pods/{victim}")["metadata"]["uid"]
        self.api.delete(f"/api/v1/namespaces/{NS}/pods/{victim}")
        self.wait_instances({"first-annotation": "after-the-plugin-rolled"}, f"the new leader recreates {victim}", exclude_uids={old})
        self.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/cnpgi-operator", "--timeout=180s")

    def set_annotations(self, annotations):
        """A parameter change of the Cluster's plugin (its Pods' annotations)."""
        self.admitted(
            "parameter change",
            lambda: self.api.merge_patch(
                f"/apis/cnpgi.io/v1/namespaces/{NS}/clusters/{CLUSTER}",
                {"spec": {"plugins": [self.cluster_object(annotations)["spec"]["plugins"][0]]}},
            ),
        )

    def leader_deleted_while_rolling(self):
        """Fault 5 of issue 32: the leader dies while it rolls the Cluster's
        Pods (deleted with a 1 s grace period). Its successor finishes the roll: both Pods end patched, none
        is lost, none is made twice (never a third instance, never two live
        Pods of one instance)."""
        old = {p["metadata"]["uid"] for p in self.instance_pods()}
        holder = self.lease_holder()
        annotations = ROLLED_ACROSS_A_FAILOVER
        self.set_annotations(annotations)

        def rolling():
            pods = self.pods(NS, f"{CLUSTER_LABEL}={CLUSTER}")
            return any(p["metadata"].get("deletionTimestamp") or p["metadata"]["uid"] not in old for p in pods)

        wait_for("the roll starts (a Pod deleted or replaced)", rolling, timeout=60, interval=0.2)
        # A 1 s grace period (a forced drain's): the leader does not get to
        # finish the roll in its preStop pause (5 s), its successor must.
        self.kubectl("-n", OPERATOR_NS, "delete", "pod", holder, "--grace-period=1", "--wait=false")
        deleted_at = time.monotonic()
        seen, most_live = set(), 0

        def done():
            nonlocal most_live
            pods = self.pods(NS, f"{CLUSTER_LABEL}={CLUSTER}")
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            names = [p["metadata"]["name"] for p in live]
            seen.update(p["metadata"]["name"] for p in pods)
            most_live = max(most_live, len(live))
            if len(names) != len(set(names)):
                raise Failure(f"two live Pods of one instance: {sorted(names)}")
            problems = [p for pod in live for p in self.hello_world_problems(pod, annotations)]
            problems += [f"{p['metadata']['name']} is the Pod from before the change" for p in live if p["metadata"]["uid"] in old]
            if len(live) != 2 or problems:
                raise Failure(f"{len(live)} live instance Pods {sorted(names)}; " + "; ".join(problems))
            return True

        wait_for("both Pods rolled and patched after the leader's deletion", done, timeout=240, interval=0.5)
        extra = seen - {f"{CLUSTER}-1", f"{CLUSTER}-2"}
        if extra or most_live > 2:
            raise Failure(f"instances made beyond the Cluster's 2: Pods {sorted(seen)}, at most {most_live} live at once")
        new_holder = self.lease_holder()
        if new_holder in (holder, None):
            raise Failure(f"the roll ended with the Lease held by {new_holder or 'nobody'}, not by a successor of the deleted {holder}")
        print(
            f"  (leader {holder} deleted mid-roll; {new_holder} finished it {time.monotonic() - deleted_at:.0f} s later;"
            f" Pods seen {sorted(seen)}, at most {most_live} live at once)",
            flush=True,
        )
        self.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/cnpgi-operator", "--timeout=180s")

    def network_cut(self):
        """Fault 6 of issue 32: the network from the operator to the plugin
        cut for a minute (packets to the plugin Pod's gRPC port dropped on the
        node). Admission fails closed, as documented for a plugin not listed
        in --fail-open, with an answer naming the plugin before the API
        server's timeout; the running Pods are left alone; a Pod deleted
        meanwhile is recreated, patched, once the network heals."""
        (plugin_pod,) = self.live_pods(OPERATOR_NS, "app.kubernetes.io/name=cnpg-i-hello-world")
        ip = plugin_pod["status"]["podIP"]
        rule = ["FORWARD", "-d", ip, "-p", "tcp", "--dport", "9090", "-j", "DROP"]
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.instance_pods()}
        self.node("iptables", "-I", *rule)
        cut_at = time.monotonic()
        try:
            self.during_cut(before)
        finally:
            remaining = 60 - (time.monotonic() - cut_at)
            if remaining > 0:
                time.sleep(remaining)
            self.node("iptables", "-D", *rule)
        healed_at = time.monotonic()
        annotations = ROLLED_ACROSS_A_FAILOVER
        pods = self.wait_instances(
            annotations, f"{CLUSTER}-1 recreated and patched once the network healed", timeout=120, exclude_uids={before[f"{CLUSTER}-1"]}
        )
        if before[f"{CLUSTER}-2"] not in {p["metadata"]["uid"] for p in pods}:
            raise Failure(f"{CLUSTER}-2 was replaced: a plugin out of reach must leave running Pods alone")
        print(f"  (cut 60 s; {CLUSTER}-1 recreated {time.monotonic() - healed_at:.0f} s after the network healed)", flush=True)

    def during_cut(self, before):
        obj = self.cluster_object({"first-annotation": "first-annotation-value"})
        obj["metadata"]["name"] = "during-cut"

        def refused():
            started = time.monotonic()
            try:
                self.api.create(obj, dry_run=True)
            except ApiError as e:
                took = time.monotonic() - started
                if PLUGIN not in str(e) or "mcluster.cnpgi.io" not in str(e):
                    raise Failure(f"refused, but not by the operator naming the plugin: {e}") from e
                if took >= 10:
                    raise Failure(f"refused after {took:.1f} s, at the API server's webhook timeout: {e}") from e
                return f"{took:.1f} s: {str(e)[:200]}"
            raise Failure("a Cluster enabling the unreachable plugin was admitted (it fails closed by default)")

        # The first call may still find the plugin ready (the cut not yet noticed):
        # it then waits for the call's own deadline.
        answer = wait_for("a Cluster enabling the cut-off plugin refused, fast, naming it", refused, timeout=40, interval=2)
        print(f"  (admission during the cut: refused in {answer})", flush=True)
        self.api.delete(f"/api/v1/namespaces/{NS}/pods/{CLUSTER}-1")
        time.sleep(20)
        pods = self.instance_pods()
        running = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        if running.get(f"{CLUSTER}-2") != before[f"{CLUSTER}-2"] or not all(self.ready(p) for p in pods if p["metadata"]["name"] == f"{CLUSTER}-2"):
            raise Failure(f"{CLUSTER}-2 was not left running during the cut: {running}")
        # A Pod is made only with the plugins' patch: none while the plugin is out of reach.
        if any(p["metadata"]["name"] == f"{CLUSTER}-1" for p in pods):
            raise Failure(f"{CLUSTER}-1 was recreated while its plugin was out of reach (without the plugin's patch)")
        status = self.cluster().get("status") or {}
        if PLUGIN not in str(status.get("phaseReason", "")):
            raise Failure(f"the Cluster's status does not name the plugin out of reach: phase {status.get('phase')!r}, reason {status.get('phaseReason')!r}")
        reason = str(status.get("phaseReason"))[:160]
        print(f"  (during the cut: {CLUSTER}-2 left running, {CLUSTER}-1 not recreated; phase {status.get('phase')!r}: {reason})", flush=True)

    def explain_commands(self):
        return [
            ("get", "pods", "-A", "-o", "wide"),
            ("-n", NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", OPERATOR_NS, "logs", "deployment/cnpgi-operator", "--tail=30"),
        ]

    def run(self):
        steps = [
            ("manifest.yaml (task manifest) applied as is with kubectl apply --server-side", self.apply_manifest),
            ("cert-manager issued the webhook's and the plugin's Certificates (kubernetes.io/tls Secrets)", self.certificates),
            ("cert-manager's cainjector filled the webhooks' caBundle", self.ca_injected),
            ("the operator Deployment has 2 Ready replicas", self.operator_ready),
            ("exactly one replica holds the leader Lease", self.one_leader),
            ("the hello-world plugin Deployment is Ready", self.plugin_ready),
            ("namespace with restricted Pod Security", self.test_namespace),
            ("the API server calls the validating webhook through its Service: invalid parameters refused", self.webhook_denies_mistake),
            ("the API server calls the mutating webhook through its Service: parameters defaulted", self.webhook_defaults),
            ("the plugin reinstalled and a Cluster applied in the same second: admitted, not refused", self.plugin_arriving),
            ("a Cluster of 2 instances is created", self.cluster_created),
            ("instance Pods Running and Ready with the plugin's labels, annotations and running pauser sidecar", self.instances_running),
            ("PostgreSQL 15 answers psql in each instance Pod", self.postgres_answers),
            ("cluster DNS: the plugin's Service name resolves in an instance Pod", self.dns_resolves),
            ("the Cluster's status: 2 ready instances and the plugin's status", self.cluster_status),
            ("a deleted instance Pod stops on SIGTERM and is recreated, patched and Running", self.killed_pod_recreated),
            ("the plugin Deployment rolled: the operator reaches the new plugin Pod, a parameter change rolls the Pods", self.plugin_rolled),
            ("the leader Pod deleted: another replica takes the Lease and reconciles", self.leader_failover),
            ("the leader Pod deleted during a rolling update: every Pod ends patched, none lost or made twice", self.leader_deleted_while_rolling),
            ("the network to the plugin cut for a minute: admission refused fast, running Pods left alone, reconciles resume", self.network_cut),
        ]
        return self.run_steps(steps, fatal=(self.apply_manifest, self.operator_ready, self.cluster_created))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--manifest", required=True, help="manifest.yaml from `task manifest`")
    p.add_argument("--postgres-image", required=True, help="the instances' PostgreSQL image, present on the nodes")
    p.add_argument("--timed-done", help="a file created once the plugin-arrival check (whose Pod start must not be slowed) is done")
    p.add_argument("--node-exec", help="the command prefix that runs a command on the node (docker exec <node>), for the network cut")
    args = p.parse_args()
    if not args.kubeconfig:
        sys.exit("scenario_operator.py: no kubeconfig (--kubeconfig or KUBECONFIG)")
    sys.exit(Scenario(args).run())


if __name__ == "__main__":
    main()
