#!/usr/bin/env python3
"""Scenario 3b of issue 35: WAL archiving through plugin-barman-cloud (the
CloudNativePG project's own CNPG-I plugin) under the real CloudNativePG, to
the same kind of S3 store (moto) as the wal-archive scenario.

Needs a kubeconfig whose cluster runs cert-manager, cluster DNS and a default
StorageClass, and whose nodes hold the images (no pull): CloudNativePG's
(--cnpg-manifest is applied, unchanged if already there), plugin-barman-cloud's
plugin and sidecar (tests/realkube/barman.sh), PostgreSQL's and moto's:

    scenario_barman_cloud.py --cnpg-manifest cnpg.yaml --plugin-manifest barman-cloud.yaml \\
        --postgres-image localhost/postgresql:15 --moto-image localhost/moto:5.2.1

`barman-cloud.yaml` is `tests/realkube/barman.sh manifest`: the release's
kubernetes/ kustomization with the local images, its cert-manager Issuer and
Certificates as they are. One named check each, `ok <name>` or `FAIL <name>:
<why>`, and `N passed, M failed` at the end (exit 1 on any failure):

* the plugin's Certificates issued, its Deployment Ready, registered by
  CloudNativePG through its Service;
* in a namespace of its own (restricted Pod Security): moto and a bucket, an
  ObjectStore on it, a 1-instance Cluster with the plugin as its WAL archiver;
* the Cluster healthy, the plugin's sidecar (`plugin-barman-cloud`, a native
  sidecar) running beside PostgreSQL, the Role the plugin writes for it;
* three segments switched: pg_stat_archiver's archived_count grown by at
  least three with failed_count 0, ContinuousArchiving=True, and the three
  segments' objects in the bucket (listed in moto);
* the namespace deleted and gone (the plugin stays in cnpg-system).
"""

import argparse
import os
import sys

import scenario_wal_archive as wa
from realkube import Failure, wait_for

PLUGIN = "barman-cloud.cloudnative-pg.io"
CNPG_NS = "cnpg-system"
NS = "realkube-barman"
CLUSTER = "barman"
STORE = "moto-store"
SEGMENTS = 3
ARCHIVER_SQL = "select archived_count || ' ' || failed_count || ' ' || coalesce(last_archived_wal, '') from pg_stat_archiver"

# scenario_wal_archive's helpers (moto, the bucket's keys, the Cluster's
# waits, the sidecar's checks) work in its module's namespace and on its
# sidecar's name: this scenario's.
wa.NS = NS
wa.SIDECAR = "plugin-barman-cloud"


def object_store(name, ns, max_parallel=None, compression="zstd"):
    """An ObjectStore on the moto of namespace `ns` (bucket wa.BUCKET, the
    credentials Secret wa.CREDENTIALS that wa.Scenario.moto makes)."""
    wal = {"compression": compression}
    if max_parallel:
        wal["maxParallel"] = max_parallel
    return {
        "apiVersion": "barmancloud.cnpg.io/v1",
        "kind": "ObjectStore",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "configuration": {
                "destinationPath": f"s3://{wa.BUCKET}/",
                "endpointURL": f"http://moto.{ns}.svc:5000",
                "s3Credentials": {
                    "accessKeyId": {"name": wa.CREDENTIALS, "key": "ACCESS_KEY_ID"},
                    "secretAccessKey": {"name": wa.CREDENTIALS, "key": "ACCESS_SECRET_KEY"},
                },
                "wal": wal,
            },
            "instanceSidecarConfiguration": {
                "env": [{"name": "AWS_DEFAULT_REGION", "value": "us-east-1"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            },
        },
    }


def cluster_object(name, ns, postgres_image, store, storage="1Gi"):
    return {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "instances": 1,
            "imageName": postgres_image,
            "storage": {"size": storage},
            "plugins": [{"name": PLUGIN, "isWALArchiver": True, "parameters": {"barmanObjectName": store}}],
        },
    }


class Scenario(wa.Scenario):
    title = "barman-cloud"

    def archiver(self):
        """(archived_count, failed_count, last_archived_wal) of the primary."""
        row = self.psql(NS, self.primary(CLUSTER), ARCHIVER_SQL)
        archived, failed, last = [*row.split(" "), ""][:3]
        return int(archived), int(failed), last

    # -- checks

    def apply_plugin(self):
        self.kubectl("apply", "--server-side", "-f", self.args.plugin_manifest)

    def plugin_ready(self):
        self.certificates_ready(CNPG_NS, ["barman-cloud-server", "barman-cloud-client"], ["barman-cloud-server-tls", "barman-cloud-client-tls"])
        self.rollout(CNPG_NS, "barman-cloud")
        self.wait_endpoints(CNPG_NS, "barman-cloud", "app=barman-cloud")

        def registered():
            events = self.events(CNPG_NS, "Service", "barman-cloud")
            if not any(e.get("reason") == "PluginRegistered" for e in events):
                raise Failure(f"no PluginRegistered event: {[(e.get('reason'), e['message']) for e in events]}")
            return True

        wait_for("CloudNativePG registers the plugin through its Service", registered, timeout=90, interval=2)

    def created(self):
        self.apply_objects(object_store(STORE, NS), cluster_object(CLUSTER, NS, self.args.postgres_image, STORE))

    def running(self):
        self.wait_healthy(CLUSTER, 1)
        self.wait_sidecars(CLUSTER, 1)

        def role():
            roles = self.api.get(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles")["items"]
            for r in roles:
                for rule in r.get("rules") or []:
                    if "objectstores" in rule.get("resources", []) and STORE in rule.get("resourceNames", [STORE]):
                        return r["metadata"]["name"]
            raise Failure(f"no Role granting the ObjectStore {STORE}: {[r['metadata']['name'] for r in roles]}")

        name = wait_for("the plugin's Role for the Cluster's ServiceAccount", role, timeout=60, interval=2)
        print(f"  (Role {name})", flush=True)

    def archiving(self):
        primary = self.primary(CLUSTER)
        archived_before, failed_before, _ = self.archiver()
        self.psql(NS, primary, "create table if not exists t (i int)")
        # psql prints INSERT's command tag, then the segment's name.
        sql = "insert into t select generate_series(1, 1000); select pg_walfile_name(pg_switch_wal())"
        segments = [self.psql(NS, primary, sql).splitlines()[-1] for _ in range(SEGMENTS)]

        def archived():
            count, failed, last = self.archiver()
            if failed != failed_before:
                raise Failure(f"pg_stat_archiver failed_count {failed} (was {failed_before})")
            if count < archived_before + SEGMENTS or last[:24] < segments[-1]:
                raise Failure(f"archived_count {count} (was {archived_before}), last_archived_wal {last!r}, waiting for {segments[-1]}")
            return count, failed

        count, failed = wait_for(f"{SEGMENTS} segments archived from {primary}", archived, timeout=180, interval=2)
        if failed:
            raise Failure(f"pg_stat_archiver failed_count {failed}")
        self.wait_archiving(CLUSTER)
        keys = self.s3_keys(f"{CLUSTER}/wals/")
        missing = [s for s in segments if not any(k.rsplit("/", 1)[-1].startswith(s) for k in keys)]
        if missing:
            raise Failure(f"{missing} not in s3://{wa.BUCKET}/{CLUSTER}/wals/: {keys[:10]}")
        print(
            f"  (archived_count {archived_before} -> {count}, failed_count {failed}; {len(keys)} objects under"
            f" s3://{wa.BUCKET}/{CLUSTER}/wals/, e.g. {next(k for k in keys if segments[-1] in k)})",
            flush=True,
        )

    def cleaned_up(self):
        # The Cluster first, while moto is there: its PostgreSQL archives its
        # last segments as it stops, and each attempt against a store gone
        # with the namespace takes barman-cloud-wal-archive over a minute.
        self.kubectl("-n", NS, "delete", f"clusters.postgresql.cnpg.io/{CLUSTER}", "--wait=true", timeout=240)

        def stopped():
            pods = self.pods(NS, wa.selector(CLUSTER))
            if pods:
                raise Failure(f"instance Pods {[p['metadata']['name'] for p in pods]}")
            return True

        wait_for(f"the Pods of {CLUSTER} gone", stopped, timeout=180, interval=2)
        self.kubectl("delete", "namespace", NS, "--wait=false")

        def gone():
            ns = self.api.maybe_get(f"/api/v1/namespaces/{NS}")
            if ns is not None:
                raise Failure(f"namespace {NS} is {ns.get('status', {}).get('phase')}")
            return True

        wait_for(f"namespace {NS} gone", gone, timeout=240, interval=2)

    def explain_commands(self):
        return [
            ("get", "pods", "-A", "-o", "wide"),
            ("-n", NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", NS, "get", "clusters.postgresql.cnpg.io,objectstores.barmancloud.cnpg.io", "-o", "wide"),
            ("-n", NS, "logs", "-l", "cnpg.io/podRole=instance", "-c", wa.SIDECAR, "--tail=30", "--prefix"),
            ("-n", CNPG_NS, "logs", "deployment/barman-cloud", "--tail=30"),
            ("-n", CNPG_NS, "logs", "deployment/cnpg-controller-manager", "--tail=40"),
        ]

    def run(self):
        steps = [
            ("CloudNativePG installed (config/default) and Ready", self.apply_cnpg),
            ("plugin-barman-cloud's manifests (the release's kubernetes/, our images) applied in cnpg-system", self.apply_plugin),
            ("plugin-barman-cloud is Ready (cert-manager's Certificates) and registered by CloudNativePG", self.plugin_ready),
            ("namespace with restricted Pod Security, moto's S3 server in it, a bucket", self.moto),
            ("an ObjectStore on moto and a 1-instance Cluster archiving WAL through the plugin are created", self.created),
            ("the Cluster healthy, the plugin-barman-cloud sidecar running beside PostgreSQL, its Role written", self.running),
            (
                f"{SEGMENTS} segments switched are archived: archived_count up, failed_count 0, ContinuousArchiving=True, objects in the bucket",
                self.archiving,
            ),
            ("the Cluster deleted, then the scenario's namespace, and gone", self.cleaned_up),
        ]
        return self.run_steps(steps, fatal=(self.apply_cnpg, self.plugin_ready, self.moto))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--cnpg-manifest", required=True, help="CloudNativePG's config/default (tests/realkube/cnpg.sh manifest)")
    p.add_argument("--plugin-manifest", required=True, help="tests/realkube/barman.sh manifest")
    p.add_argument("--postgres-image", required=True, help="the instances' PostgreSQL image, present on the nodes")
    p.add_argument("--moto-image", required=True, help="an image with moto's server (python3 -m moto.server), present on the nodes")
    args = p.parse_args()
    if not args.kubeconfig:
        sys.exit("scenario_barman_cloud.py: no kubeconfig (--kubeconfig or KUBECONFIG)")
    sys.exit(Scenario(args).run())


if __name__ == "__main__":
    main()
