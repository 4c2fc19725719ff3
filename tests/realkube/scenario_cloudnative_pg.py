#!/usr/bin/env python3
"""Scenario 2 of issue 25: the real CloudNativePG calling the Rust hello-world plugin.

Needs a kubeconfig whose cluster has cert-manager, cluster DNS and a default
StorageClass, and whose nodes hold the images (no pull: IfNotPresent):

    scenario_cloudnative_pg.py --cnpg-manifest cnpg.yaml --plugin-manifest hello-world.yaml \\
        --postgres-image localhost/postgresql:15

`cnpg.yaml` is CloudNativePG's own `config/default` (tests/realkube/cnpg.sh
manifest), `hello-world.yaml` the plugin's `manifests/hello-world` with its
namespace set to CloudNativePG's (`cnpg-system`), both applied as they are.
One named check each, `ok <name>` or `FAIL <name>: <why>`, and `N passed,
M failed` at the end (exit 1 on any failure): CloudNativePG's operator Ready
with its self-signed webhooks; the plugin Ready and registered by
CloudNativePG through its Service (mutual TLS to
`<service>.<namespace>.svc`); a Cluster of 2 instances reaching "Cluster in
healthy state" with every instance Pod carrying the plugin's labels,
annotations and running `pauser` sidecar (OperatorLifecycle), and the
plugin's status in `status.pluginStatus` (SetStatusInCluster); PostgreSQL 15 answering `psql` in
each Pod, the standby streaming from the primary; a deleted standby Pod
stopping on SIGTERM and coming back patched and streaming.

Not checked, because CloudNativePG v1.30.0 never calls them: the plugin's
ValidateClusterCreate/Change and MutateCluster (its webhooks do not ask the
plugins; the client code has no caller), so a Cluster with parameters the
plugin refuses is admitted.
"""

import argparse
import json
import os
import sys
import time

import realkube
from realkube import ApiError, Failure, delete_and_time, wait_for

PLUGIN = "cnpg-i-hello-world.cloudnative-pg.io"
CNPG_NS = "cnpg-system"
NS = "realkube-s2"
CLUSTER = "pg"
ANNOTATIONS = {"first-annotation": "first-annotation-value"}
INSTANCES = f"cnpg.io/cluster={CLUSTER},cnpg.io/podRole=instance"


class Scenario(realkube.Scenario):
    title = "cloudnative-pg"

    def cluster_path(self, name=CLUSTER):
        return f"/apis/postgresql.cnpg.io/v1/namespaces/{NS}/clusters/{name}"

    def cluster_object(self, annotations_json):
        return {
            "apiVersion": "postgresql.cnpg.io/v1",
            "kind": "Cluster",
            "metadata": {"name": CLUSTER, "namespace": NS},
            "spec": {
                "instances": 2,
                "imageName": self.args.postgres_image,
                "storage": {"size": "1Gi"},
                "plugins": [
                    {
                        "name": PLUGIN,
                        "parameters": {
                            "labels": json.dumps({"first-label": "first-label-value", "second-label": "second-label-value"}),
                            "annotations": annotations_json,
                        },
                    }
                ],
            },
        }

    def instance_pods(self):
        return self.live_pods(NS, INSTANCES)

    # -- checks

    def apply_cnpg(self):
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", self.args.cnpg_manifest, timeout=300)

    def cnpg_ready(self):
        self.rollout(CNPG_NS, "cnpg-controller-manager", timeout=240)

        # CloudNativePG makes its webhook certificate and patches the
        # configurations' caBundle itself (no cert-manager).
        def injected():
            for kind, name in (
                ("mutatingwebhookconfigurations", "cnpg-mutating-webhook-configuration"),
                ("validatingwebhookconfigurations", "cnpg-validating-webhook-configuration"),
            ):
                for hook in self.api.get(f"/apis/admissionregistration.k8s.io/v1/{kind}/{name}")["webhooks"]:
                    if not hook["clientConfig"].get("caBundle"):
                        raise Failure(f"{kind}/{name} {hook['name']} has no caBundle yet")
            return True

        wait_for("CloudNativePG fills its webhooks' caBundle", injected, timeout=60, interval=1)
        self.wait_endpoints(CNPG_NS, "cnpg-webhook-service", "app.kubernetes.io/name=cloudnative-pg")

    def apply_plugin(self):
        self.kubectl("apply", "--server-side", "-f", self.args.plugin_manifest)

    def plugin_ready(self):
        self.certificates_ready(
            CNPG_NS,
            ["cnpg-i-hello-world-server", "cnpg-i-hello-world-client"],
            ["cnpg-i-hello-world-server-tls", "cnpg-i-hello-world-client-tls"],
        )
        self.rollout(CNPG_NS, "cnpg-i-hello-world")
        self.wait_endpoints(CNPG_NS, "cnpg-i-hello-world", "app.kubernetes.io/name=cnpg-i-hello-world")

    def plugin_registered(self):
        def probe():
            service = self.api.get(f"/api/v1/namespaces/{CNPG_NS}/services/cnpg-i-hello-world")
            if "cnpg.io/cleanupPlugin" not in (service["metadata"].get("finalizers") or []):
                raise Failure(f"no cnpg.io/cleanupPlugin finalizer on the Service: {service['metadata'].get('finalizers')}")
            events = self.events(CNPG_NS, "Service", "cnpg-i-hello-world")
            registered = [e["message"] for e in events if e.get("reason") == "PluginRegistered"]
            failed = [f"{e.get('reason')}: {e['message']}" for e in events if e.get("type") == "Warning"]
            if not registered:
                raise Failure(f"no PluginRegistered event (warnings: {failed})")
            if "cnpg-i-hello-world.cnpg-system.svc:9090" not in registered[-1]:
                raise Failure(f"registered at an unexpected address: {registered[-1]}")
            return True

        wait_for("CloudNativePG registers the plugin through its Service", probe, timeout=90, interval=2)

    def test_namespace(self):
        self.namespace(NS)

    def admitted(self, what, call):
        """An API call through CloudNativePG's webhooks, again for up to 60 s
        while the webhook Service is not routed yet or the plugin not
        reachable from the operator yet."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return call()
            except ApiError as e:
                text = str(e)
                transient = ("failed calling webhook" in text and ("connection refused" in text or "no endpoints" in text)) or (
                    "not available" in text and PLUGIN in text
                )
                if not transient or time.monotonic() > deadline:
                    raise
                print(f"  ({what}: {text[:160]}...; again in 2 s)", flush=True)
                time.sleep(2)

    def cluster_created(self):
        self.admitted("Cluster", lambda: self.api.create(self.cluster_object(json.dumps(ANNOTATIONS))))

    def wait_instances(self, what, timeout, exclude_uids=()):
        def probe():
            pods = self.instance_pods()
            if len(pods) != 2:
                raise Failure(f"{len(pods)} instance Pods: {[p['metadata']['name'] for p in pods]}")
            problems = [p for pod in pods for p in self.hello_world_problems(pod, ANNOTATIONS)]
            problems += [f"{p['metadata']['name']} is still the old Pod" for p in pods if p["metadata"]["uid"] in exclude_uids]
            if problems:
                raise Failure("; ".join(problems))
            return pods

        return wait_for(what, probe, timeout=timeout, interval=2)

    def instances_running(self):
        self.wait_instances("2 instance Pods Running, Ready and patched by the plugin", timeout=420)

    def cluster_healthy(self):
        def probe():
            cluster = self.api.get(self.cluster_path())
            status = cluster.get("status") or {}
            entries = [s for s in status.get("pluginStatus") or [] if s.get("name") == PLUGIN]
            if status.get("phase") != "Cluster in healthy state" or status.get("readyInstances") != 2:
                raise Failure(f"phase {status.get('phase')!r}, readyInstances {status.get('readyInstances')}")
            if not entries or not entries[0].get("capabilities"):
                raise Failure(f"pluginStatus {status.get('pluginStatus')}")
            # SetStatusInCluster: the plugin's answer, stored as it is.
            if json.loads(entries[0].get("status") or "null") != {"enabled": True}:
                raise Failure(f'the plugin\'s status in pluginStatus: {entries[0].get("status")!r}, not {{"enabled": true}}')
            return cluster

        wait_for("the Cluster in healthy state, with the plugin's status", probe, timeout=180, interval=2)

    def primary(self):
        return self.api.get(self.cluster_path())["status"]["currentPrimary"]

    def postgres_answers(self):
        for pod in self.instance_pods():
            name = pod["metadata"]["name"]
            out = self.psql(NS, name, "select current_setting('server_version_num')::int / 10000")
            if out != "15":
                raise Failure(f"psql in {name} answered {out!r}, not 15")

    def standby_streams(self, table="realkube_s2"):
        primary = self.primary()
        pods = [p["metadata"]["name"] for p in self.instance_pods()]
        (standby,) = [p for p in pods if p != primary]

        def streaming():
            out = self.psql(NS, primary, "select application_name || ':' || state from pg_stat_replication")
            if f"{standby}:streaming" not in out.splitlines():
                raise Failure(f"pg_stat_replication on {primary}: {out!r}")
            return True

        wait_for(f"{standby} streams from {primary}", streaming, timeout=120, interval=2)
        marker = f"written-at-{time.time_ns()}"
        self.psql(NS, primary, f"create table if not exists {table} (v text); insert into {table} values ('{marker}')")

        def replicated():
            return self.psql(NS, standby, f"select count(*) from {table} where v = '{marker}'") == "1"

        wait_for(f"a row written on {primary} is read on {standby}", replicated, timeout=60, interval=1)

    def standby_deleted(self):
        primary = self.primary()
        (standby,) = [p["metadata"]["name"] for p in self.instance_pods() if p["metadata"]["name"] != primary]
        # CloudNativePG's instance manager shuts PostgreSQL down on SIGTERM;
        # the plugin's sidecar must then stop too, not wait for the grace
        # period (CloudNativePG's is 1800 s) to end in SIGKILL.
        old, took = delete_and_time(self.api, NS, standby, timeout=120)
        if took > 60:
            raise Failure(f"{standby} took {took:.0f} s to stop")
        print(f"  ({standby} stopped {took:.1f} s after its deletion)", flush=True)
        self.wait_instances(f"{standby} recreated, patched and Running", timeout=240, exclude_uids={old})
        self.standby_streams()

    def notes(self):
        """Not a check: how often CloudNativePG's cluster controller patched
        the plugins' status of this Cluster in the last 30 s (CloudNativePG
        v1.30.0 rebuilds status.pluginStatus without the plugins' `status`
        and then sets it again, two writes per reconcile that each start the
        next one, while a plugin answers SetStatusInCluster: upstream's
        cloudnative-pg#11385, fixed after v1.30.0)."""
        try:
            logs = self.kubectl("-n", CNPG_NS, "logs", "deployment/cnpg-controller-manager", "--since=30s")
        except Failure as e:
            print(f"  (CloudNativePG's log unreadable: {e})", flush=True)
            return
        patches = [line for line in logs.splitlines() if "patching cluster status with the updated plugin statuses" in line and f'"namespace":"{NS}"' in line]
        print(f"  (note: CloudNativePG patched the plugin status of {NS}/{CLUSTER} {len(patches)} times in the last 30 s)", flush=True)

    def explain_commands(self):
        return [
            ("get", "pods", "-A", "-o", "wide"),
            ("-n", NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", CNPG_NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", NS, "get", "clusters.postgresql.cnpg.io", "-o", "yaml"),
            ("-n", CNPG_NS, "logs", "deployment/cnpg-controller-manager", "--tail=40"),
        ]

    def run(self):
        steps = [
            ("CloudNativePG's config/default applied as is with kubectl apply --server-side", self.apply_cnpg),
            ("the CloudNativePG operator is Ready, its webhooks' caBundle set", self.cnpg_ready),
            ("the hello-world plugin's manifests applied in cnpg-system", self.apply_plugin),
            ("the hello-world plugin is Ready with its cert-manager Certificates", self.plugin_ready),
            ("CloudNativePG registered the plugin through its Service (<service>.cnpg-system.svc:9090)", self.plugin_registered),
            ("namespace with restricted Pod Security", self.test_namespace),
            ("a Cluster of 2 instances with the plugin is created", self.cluster_created),
            ("instance Pods Running and Ready with the plugin's labels, annotations and running pauser sidecar", self.instances_running),
            ("the Cluster is in healthy state with 2 ready instances and the plugin's status (SetStatusInCluster)", self.cluster_healthy),
            ("PostgreSQL 15 answers psql in each instance Pod", self.postgres_answers),
            ("the standby streams from the primary: a row written on the primary is read on it", self.standby_streams),
            ("a deleted standby stops on SIGTERM and comes back patched and streaming", self.standby_deleted),
        ]
        return self.run_steps(steps, fatal=(self.apply_cnpg, self.cnpg_ready, self.cluster_created))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--cnpg-manifest", required=True, help="CloudNativePG's config/default (tests/realkube/cnpg.sh manifest)")
    p.add_argument("--plugin-manifest", required=True, help="manifests/hello-world in cnpg-system, images set")
    p.add_argument("--postgres-image", required=True, help="the instances' PostgreSQL image, present on the nodes")
    args = p.parse_args()
    if not args.kubeconfig:
        sys.exit("scenario_cloudnative_pg.py: no kubeconfig (--kubeconfig or KUBECONFIG)")
    sys.exit(Scenario(args).run())


if __name__ == "__main__":
    main()
