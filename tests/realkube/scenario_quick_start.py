"""Scenario 0: what `task local-kind-deploy` and `task cnpg-kind-deploy` (the quick starts of the README and book/src/guides/deploy.md) left.

Each task ends by applying its sample Cluster once, right after the rollouts
(a plugin that is arriving must be waited for, not refused):
manifests/samples/cluster-example.yaml (cnpgi-operator) and
manifests/samples/cloudnative-pg/cluster-example.yaml (the real CloudNativePG).
This checks what a user then sees: each sample's instance Pods carry what the
hello-world plugin adds (the `plugin-metadata` label for the plain sample, the
sample's labels for CloudNativePG's, and the `pauser` sidecar), they run and are
Ready, and the Cluster's status lists the plugin. Then it deletes both samples,
so the scenarios that follow have the node to themselves.

    scenario_quick_start.py --kubeconfig FILE
"""

import argparse
import os
import sys

from realkube import Failure, Scenario, wait_for

NS = "default"
PLUGIN = "cnpg-i-hello-world.cloudnative-pg.io"
# (API path of the Clusters, the sample's name, its instance Pods' selector,
#  the label the plugin adds to them)
OURS = ("/apis/cnpgi.io/v1", "cluster-example", "cnpgi.io/cluster=cluster-example", ("plugin-metadata", "default"))
CNPG = (
    "/apis/postgresql.cnpg.io/v1",
    "cnpg-cluster-example",
    "cnpg.io/cluster=cnpg-cluster-example,cnpg.io/podRole=instance",
    ("first-label", "first-label-value"),
)


class QuickStart(Scenario):
    title = "quick starts (task local-kind-deploy, task cnpg-kind-deploy)"

    def cluster(self, sample):
        api, name, _, _ = sample
        return self.api.get(f"{api}/namespaces/{NS}/clusters/{name}")

    def patched(self, sample):
        _, name, selector, (label, value) = sample
        want = self.cluster(sample)["spec"]["instances"]

        def probe():
            pods = self.live_pods(NS, selector)
            problems = []
            for pod in pods:
                pod_name = pod["metadata"]["name"]
                have = pod["metadata"].get("labels", {}).get(label)
                if have != value:
                    problems.append(f"{pod_name}: label {label}={have!r}")
                if "pauser" not in [c["name"] for c in pod["spec"].get("initContainers", [])]:
                    problems.append(f"{pod_name}: no pauser sidecar")
            if len(pods) != want or problems:
                raise Failure(f"{name}: {len(pods)} of {want} instance Pods; {problems}")
            return True

        # CloudNativePG makes its instances one after the other, each once the previous is Ready.
        wait_for(f"{name}'s Pods patched by the plugin", probe, timeout=300, interval=3)

    def pods_ready(self, sample):
        _, name, selector, _ = sample

        def probe():
            pods = self.live_pods(NS, selector)
            not_ready = [p["metadata"]["name"] for p in pods if not self.ready(p)]
            if not pods or not_ready:
                raise Failure(f"{name}: not Ready: {not_ready or 'no Pods'}")
            return True

        wait_for(f"{name}'s Pods Ready", probe, timeout=240, interval=3)

    def plugin_status(self, sample):
        def probe():
            status = self.cluster(sample).get("status") or {}
            names = [p.get("name") for p in status.get("pluginStatus") or []]
            if PLUGIN not in names:
                raise Failure(f"{sample[1]}: status.pluginStatus names {names}")
            return True

        wait_for("the plugin in the Cluster's status", probe, timeout=90, interval=2)

    def deleted(self):
        for api, name, _, _ in (OURS, CNPG):
            group = api.split("/")[2]
            self.kubectl("-n", NS, "delete", f"clusters.{group}/{name}", "--wait=true", timeout=120)
        for _, name, selector, _ in (OURS, CNPG):
            wait_for(f"{name}'s Pods gone", lambda s=selector: not self.pods(NS, s), timeout=120, interval=2)

    def explain_commands(self):
        return [
            ("get", "pods", "-A", "-o", "wide"),
            ("-n", NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", "cnpgi-system", "logs", "deployment/cnpgi-operator", "--tail=30"),
        ]

    def run(self):
        steps = [
            ("cnpgi-operator's sample: instance Pods carry the plugin's label and pauser sidecar", lambda: self.patched(OURS)),
            ("cnpgi-operator's sample: instance Pods Running and Ready", lambda: self.pods_ready(OURS)),
            ("cnpgi-operator's sample: the Cluster's status lists the hello-world plugin", lambda: self.plugin_status(OURS)),
            ("CloudNativePG's sample: instance Pods carry the plugin's labels and pauser sidecar", lambda: self.patched(CNPG)),
            ("CloudNativePG's sample: instance Pods Running and Ready", lambda: self.pods_ready(CNPG)),
            ("CloudNativePG's sample: the Cluster's status lists the hello-world plugin", lambda: self.plugin_status(CNPG)),
            ("both samples deleted, their Pods gone", self.deleted),
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
