"""Scenario 0: what `task local-kind-deploy` (the README's quick start) left on the cluster.

The task ends by applying manifests/samples/cluster-example.yaml, once, right
after the operator's and the plugin's rollouts (no retry: a plugin that is
arriving must be waited for, not refused). This checks what a user then sees:
the sample Cluster's instance Pods carry what the hello-world plugin adds (its
`plugin-metadata` label, its `pauser` sidecar), they run and are Ready, and the
Cluster's status lists the plugin. Then it deletes the sample Cluster, so the
scenarios that follow have the node to themselves.

    scenario_quick_start.py --kubeconfig FILE
"""

import argparse
import os
import sys

from realkube import Failure, Scenario, wait_for

NS = "default"
CLUSTER = "cluster-example"
PLUGIN = "cnpg-i-hello-world.cloudnative-pg.io"


class QuickStart(Scenario):
    title = "quick start (task local-kind-deploy)"

    def instances(self):
        return self.live_pods(NS, f"cnpgi.io/cluster={CLUSTER}")

    def sample_patched(self):
        want = self.api.get(f"/apis/cnpgi.io/v1/namespaces/{NS}/clusters/{CLUSTER}")["spec"]["instances"]

        def probe():
            pods = self.instances()
            problems = []
            for pod in pods:
                name = pod["metadata"]["name"]
                if pod["metadata"].get("labels", {}).get("plugin-metadata") != "default":
                    problems.append(f"{name}: label plugin-metadata={pod['metadata'].get('labels', {}).get('plugin-metadata')!r}")
                if "pauser" not in [c["name"] for c in pod["spec"].get("initContainers", [])]:
                    problems.append(f"{name}: no pauser sidecar")
            if len(pods) != want or problems:
                raise Failure(f"{len(pods)} of {want} instance Pods; {problems}")
            return True

        wait_for("the sample Cluster's Pods patched by the plugin", probe, timeout=120, interval=2)

    def sample_ready(self):
        def probe():
            pods = self.instances()
            not_ready = [p["metadata"]["name"] for p in pods if not self.ready(p)]
            if not pods or not_ready:
                raise Failure(f"not Ready: {not_ready or 'no Pods'}")
            return True

        wait_for("the sample Cluster's Pods Ready", probe, timeout=240, interval=3)

    def plugin_status(self):
        def probe():
            status = self.api.get(f"/apis/cnpgi.io/v1/namespaces/{NS}/clusters/{CLUSTER}").get("status") or {}
            names = [p.get("name") for p in status.get("pluginStatus") or []]
            if PLUGIN not in names:
                raise Failure(f"status.pluginStatus names {names}")
            return True

        wait_for("the plugin in the Cluster's status", probe, timeout=60, interval=2)

    def sample_deleted(self):
        self.kubectl("-n", NS, "delete", f"clusters.cnpgi.io/{CLUSTER}", "--wait=true", timeout=120)
        wait_for("the sample Cluster's Pods gone", lambda: not self.pods(NS, f"cnpgi.io/cluster={CLUSTER}"), timeout=120, interval=2)

    def explain_commands(self):
        return [
            ("get", "pods", "-A", "-o", "wide"),
            ("-n", NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", "cnpgi-system", "logs", "deployment/cnpgi-operator", "--tail=30"),
        ]

    def run(self):
        steps = [
            ("the sample Cluster's instance Pods carry the plugin's label and pauser sidecar", self.sample_patched),
            ("the sample Cluster's instance Pods are Running and Ready", self.sample_ready),
            ("the sample Cluster's status lists the hello-world plugin", self.plugin_status),
            ("the sample Cluster deleted, its Pods gone", self.sample_deleted),
        ]
        return self.run_steps(steps)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    args = p.parse_args()
    if not args.kubeconfig:
        sys.exit("scenario_quick_start.py: no kubeconfig (--kubeconfig or KUBECONFIG)")
    sys.exit(QuickStart(args).run())


if __name__ == "__main__":
    main()
