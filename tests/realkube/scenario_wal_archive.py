#!/usr/bin/env python3
"""Scenario 3 of issue 25: WAL archiving, a backup and a recovery, for real,
through the Rust wal-archive plugin called by the real CloudNativePG.

Needs a kubeconfig whose cluster runs CloudNativePG (scenario 2 installs it;
--cnpg-manifest applies it again, unchanged) and has cert-manager, cluster
DNS and a default StorageClass, and whose nodes hold the images (no pull):

    scenario_wal_archive.py --cnpg-manifest cnpg.yaml --plugin-manifest wal-archive.yaml \\
        --postgres-image localhost/postgresql:15 --moto-image localhost/moto:5.2.1

`wal-archive.yaml` is `examples/wal-archive/manifests` built by kustomize with
the image set, applied as it is. One named check each, `ok <name>` or
`FAIL <name>: <why>`, and `N passed, M failed` at the end (exit 1 on any
failure):

* the plugin Ready and registered by CloudNativePG through its Service;
* Cluster `local` (1 instance, the plugin's default store: a directory on the
  instance's PersistentVolume): the plugin's sidecar injected by its
  lifecycle hook and running beside PostgreSQL, `ContinuousArchiving=True`,
  the WAL objects in the store, a `Backup` with `method: plugin` completed;
* Cluster `origin` (2 instances, S3 on a moto Pod): the same, every instance
  Pod with the sidecar, the plugin's metrics in each instance's /metrics;
  rows written before a Backup, the Backup completed,
  rows written after it, a point in time, rows written after that, the WAL
  archived;
* Cluster `restored` bootstrapped with `recovery` from `origin` through the
  plugin to that point in time: its `full-recovery` Job given the sidecar,
  every row written before the backup and after it up to the target present
  and none after it (`psql` in its Pod), archiving to its own folder;
* a deleted instance Pod of `origin` stopping on SIGTERM, the sidecar too,
  and coming back with it.
"""

import argparse
import json
import os
import sys
import time

import realkube
from realkube import Failure, delete_and_time, wait_for

PLUGIN = "wal-archive.cnpgi.io"
SIDECAR = "plugin-wal-archive"
CNPG_NS = "cnpg-system"
NS = "realkube-s3"
BUCKET = "backups"
CREDENTIALS = "s3-credentials"
PGDATA_STORE = "/var/lib/postgresql/data/wal-archive"


def selector(cluster):
    return f"cnpg.io/cluster={cluster},cnpg.io/podRole=instance"


class Scenario(realkube.Scenario):
    title = "wal-archive"

    def __init__(self, args):
        super().__init__(args)
        self.target_time = None
        self.rows = {}

    # -- helpers

    def s3_parameters(self, server_name):
        return {
            "destinationPath": f"s3://{BUCKET}",
            "endpointURL": f"http://moto.{NS}.svc:5000",
            "s3CredentialsSecret": CREDENTIALS,
            "serverName": server_name,
        }

    def cluster_object(self, name, instances, parameters=None, **spec):
        plugin = {"name": PLUGIN, "isWALArchiver": True}
        if parameters:
            plugin["parameters"] = parameters
        return {
            "apiVersion": "postgresql.cnpg.io/v1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "instances": instances,
                "imageName": self.args.postgres_image,
                "storage": {"size": "1Gi"},
                "plugins": [plugin],
                **spec,
            },
        }

    def cluster(self, name):
        return self.api.get(f"/apis/postgresql.cnpg.io/v1/namespaces/{NS}/clusters/{name}")

    def primary(self, name):
        return self.cluster(name)["status"]["currentPrimary"]

    def wait_healthy(self, name, instances, timeout=480):
        def probe():
            status = self.cluster(name).get("status") or {}
            if status.get("phase") != "Cluster in healthy state" or status.get("readyInstances") != instances:
                raise Failure(f"phase {status.get('phase')!r}, readyInstances {status.get('readyInstances')}")
            return True

        wait_for(f"Cluster {name} in healthy state with {instances} ready instances", probe, timeout=timeout, interval=3)

    def sidecar_problems(self, pod):
        """What is wrong with the plugin's sidecar in the Pod (empty: nothing)."""
        name = pod["metadata"]["name"]
        init = pod["spec"].get("initContainers", [])
        sidecars = [c for c in init if c["name"] == SIDECAR]
        if not sidecars:
            return [f"{name}: no {SIDECAR} in initContainers {[c['name'] for c in init]}"]
        problems = []
        sidecar = sidecars[0]
        if sidecar.get("restartPolicy") != "Always":
            problems.append(f"{name}: {SIDECAR} is not a native sidecar (restartPolicy {sidecar.get('restartPolicy')})")
        if not any(m["mountPath"] == "/plugins" for m in sidecar.get("volumeMounts", [])):
            problems.append(f"{name}: {SIDECAR} does not mount /plugins")
        if not {"cpu", "memory"} <= set(sidecar.get("resources", {}).get("requests", {})):
            problems.append(f"{name}: {SIDECAR} requests no cpu and memory (a quota requiring requests would refuse the Pod)")
        statuses = {s["name"]: s for s in pod["status"].get("initContainerStatuses", []) + pod["status"].get("containerStatuses", [])}
        side, postgres = statuses.get(SIDECAR, {}), statuses.get("postgres", {})
        if "running" not in side.get("state", {}) or not side.get("started"):
            problems.append(f"{name}: {SIDECAR} is {side.get('state')}")
        if "running" not in postgres.get("state", {}) or not postgres.get("ready"):
            problems.append(f"{name}: postgres is {postgres.get('state')}, ready {postgres.get('ready')}")
        if not problems:
            # A native sidecar starts before the main container.
            side_at = side["state"]["running"]["startedAt"]
            postgres_at = postgres["state"]["running"]["startedAt"]
            if side_at > postgres_at:
                problems.append(f"{name}: {SIDECAR} started at {side_at}, after postgres ({postgres_at})")
            if side.get("restartCount") or postgres.get("restartCount"):
                problems.append(f"{name}: restarts: {SIDECAR} {side.get('restartCount')}, postgres {postgres.get('restartCount')}")
        return problems

    def wait_sidecars(self, cluster, instances):
        def probe():
            pods = self.live_pods(NS, selector(cluster))
            if len(pods) != instances:
                raise Failure(f"{len(pods)} instance Pods")
            problems = [p for pod in pods for p in self.sidecar_problems(pod)]
            if problems:
                raise Failure("; ".join(problems))
            return True

        wait_for(f"the plugin's sidecar in each Pod of {cluster}", probe, timeout=120, interval=2)

    def wait_archiving(self, cluster):
        def probe():
            c = self.condition(self.cluster(cluster), "ContinuousArchiving")
            if not c or c.get("status") != "True":
                raise Failure(f"ContinuousArchiving: {c}")
            return True

        wait_for(f"ContinuousArchiving=True on {cluster}", probe, timeout=180, interval=2)

    def switch_and_wait_archived(self, cluster):
        """Switches the primary to a new WAL segment and waits until the
        previous one is archived (pg_stat_archiver); returns its name."""
        primary = self.primary(cluster)
        segment = self.psql(NS, primary, "select pg_walfile_name(pg_switch_wal())")

        def archived():
            row = self.psql(
                NS,
                primary,
                "select coalesce(last_archived_wal, '') || ' ' || failed_count || ' ' || coalesce(last_failed_wal, '') from pg_stat_archiver",
            )
            last = row.split(" ")[0]
            if not last or last[:24] < segment:
                raise Failure(f"{segment} not archived yet: pg_stat_archiver {row!r}")
            return True

        wait_for(f"{segment} archived from {primary}", archived, timeout=120, interval=2)
        return segment

    def backup(self, cluster, name):
        self.apply_objects(
            {
                "apiVersion": "postgresql.cnpg.io/v1",
                "kind": "Backup",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"cluster": {"name": cluster}, "method": "plugin", "pluginConfiguration": {"name": PLUGIN}},
            }
        )

        def completed():
            status = self.api.get(f"/apis/postgresql.cnpg.io/v1/namespaces/{NS}/backups/{name}").get("status") or {}
            if status.get("phase") == "failed":
                raise Failure(f"Backup {name} failed: {status.get('error')}")
            if status.get("phase") != "completed":
                raise Failure(f"phase {status.get('phase')!r}")
            return status

        status = wait_for(f"Backup {name} completed", completed, timeout=300, interval=2)
        missing = [k for k in ("backupId", "beginWal", "endWal", "beginLSN", "endLSN", "pluginMetadata") if not status.get(k)]
        if missing:
            raise Failure(f"Backup {name} completed without {missing}: {status}")
        pod = status.get("instanceID", {}).get("podName")
        print(f"  (Backup {name}: id {status['backupId']}, WAL {status['beginWal']}..{status['endWal']}, on {pod})", flush=True)
        return status

    def moto_python(self, code):
        pod = next(p["metadata"]["name"] for p in self.live_pods(NS, "app.kubernetes.io/name=moto") if self.ready(p))
        prelude = (
            "import boto3; s3 = boto3.client('s3', endpoint_url='http://127.0.0.1:5000', aws_access_key_id='realkube',"
            " aws_secret_access_key='realkube', region_name='us-east-1'); "
        )
        return self.kubectl("-n", NS, "exec", pod, "--", "python3", "-c", prelude + code)

    def s3_keys(self, prefix):
        out = self.moto_python(
            f"p = s3.get_paginator('list_objects_v2'); "
            f"[print(o['Key']) for page in p.paginate(Bucket='{BUCKET}', Prefix='{prefix}') for o in page.get('Contents', [])]"
        )
        return out.split()

    # -- checks

    def apply_cnpg(self):
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", self.args.cnpg_manifest, timeout=300)
        self.rollout(CNPG_NS, "cnpg-controller-manager", timeout=240)

    def apply_plugin(self):
        self.kubectl("apply", "--server-side", "-f", self.args.plugin_manifest)

    def plugin_ready(self):
        self.certificates_ready(
            CNPG_NS,
            ["cnpgi-wal-archive-server", "cnpgi-wal-archive-client"],
            ["cnpgi-wal-archive-server-tls", "cnpgi-wal-archive-client-tls"],
        )
        self.rollout(CNPG_NS, "cnpgi-wal-archive")
        self.wait_endpoints(CNPG_NS, "cnpgi-wal-archive", "app.kubernetes.io/name=cnpgi-wal-archive")

        def registered():
            events = self.events(CNPG_NS, "Service", "cnpgi-wal-archive")
            if not any(e.get("reason") == "PluginRegistered" for e in events):
                raise Failure(f"no PluginRegistered event: {[(e.get('reason'), e['message']) for e in events]}")
            return True

        wait_for("CloudNativePG registers the plugin through its Service", registered, timeout=90, interval=2)

    # moto's objects on a size-limited tmpfs (scenario_faults fills it): None
    # keeps them in moto's memory.
    MOTO_SPILL = None

    def moto(self):
        self.namespace(NS)
        # Every object's bytes in a file of TMPDIR (moto spills a value larger
        # than MOTO_S3_DEFAULT_KEY_BUFFER_SIZE bytes to a temporary file), on a
        # memory-backed emptyDir the kubelet mounts as a tmpfs of sizeLimit: a
        # store whose volume can be full, failing a PUT with ENOSPC (moto
        # answers 500 and keeps no object).
        spill_env, spill_mounts, spill_volumes = [], [], []
        if self.MOTO_SPILL:
            spill_env = [{"name": "TMPDIR", "value": "/spill"}, {"name": "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", "value": "1"}]
            spill_mounts = [{"name": "spill", "mountPath": "/spill"}]
            spill_volumes = [{"name": "spill", "emptyDir": {"medium": "Memory", "sizeLimit": self.MOTO_SPILL}}]
        labels = {"app.kubernetes.io/name": "moto"}
        container_security = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        self.apply_objects(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "moto", "namespace": NS, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "automountServiceAccountToken": False,
                            # moto reads MOTO_PORT, which a Service named moto
                            # would set to tcp://… through the service links.
                            "enableServiceLinks": False,
                            "containers": [
                                {
                                    "name": "moto",
                                    "image": self.args.moto_image,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["python3", "-m", "moto.server", "-H", "0.0.0.0", "-p", "5000"],
                                    # Path-style buckets whatever the Host: moto would
                                    # take `moto` of moto.<namespace>.svc for a bucket.
                                    "env": [{"name": "HOME", "value": "/tmp"}, {"name": "S3_IGNORE_SUBDOMAIN_BUCKETNAME", "value": "true"}, *spill_env],
                                    "volumeMounts": spill_mounts,
                                    "ports": [{"name": "s3", "containerPort": 5000}],
                                    "readinessProbe": {"tcpSocket": {"port": "s3"}, "periodSeconds": 2},
                                    "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                                    "securityContext": container_security,
                                }
                            ],
                            "volumes": spill_volumes,
                        },
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "moto", "namespace": NS, "labels": labels},
                "spec": {"selector": labels, "ports": [{"name": "s3", "port": 5000, "targetPort": "s3"}]},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": CREDENTIALS, "namespace": NS},
                "stringData": {"ACCESS_KEY_ID": "realkube", "ACCESS_SECRET_KEY": "realkube"},
            },
        )
        self.rollout(NS, "moto")
        self.wait_endpoints(NS, "moto", "app.kubernetes.io/name=moto")
        self.moto_python(f"s3.create_bucket(Bucket='{BUCKET}')")

    # Cluster `local`: the default store, on the instance's PersistentVolume

    def local_created(self):
        self.kubectl("apply", "-f", "-", stdin=json.dumps(self.cluster_object("local", 1)))

    def local_running(self):
        self.wait_healthy("local", 1)
        self.wait_sidecars("local", 1)

    def local_archiving(self):
        primary = self.primary("local")
        self.psql(NS, primary, "create table t as select generate_series(1, 1000) as i")
        segment = self.switch_and_wait_archived("local")
        self.wait_archiving("local")
        # The store is a directory of the instance's volume: the object is there.
        listing = self.kubectl("-n", NS, "exec", primary, "-c", "postgres", "--", "find", f"{PGDATA_STORE}/local/wals", "-type", "f")
        names = {os.path.basename(line) for line in listing.split()}
        if f"{segment}.zst" not in names:
            raise Failure(f"{segment}.zst is not in {PGDATA_STORE}/local/wals: {sorted(names)[:10]}")
        volume = [v for v in self.api.get(f"/api/v1/namespaces/{NS}/pods/{primary}")["spec"]["volumes"] if v["name"] == "pgdata"]
        if not volume or not volume[0].get("persistentVolumeClaim"):
            raise Failure(f"PGDATA of {primary} is not a PersistentVolumeClaim: {volume}")

    def local_backup(self):
        status = self.backup("local", "local-1")
        listing = self.kubectl(
            "-n", NS, "exec", self.primary("local"), "-c", "postgres", "--",
            "find", f"{PGDATA_STORE}/local/backups/{status['backupId']}", "-type", "f",
        )  # fmt: skip
        names = sorted(os.path.basename(line) for line in listing.split())
        if names != ["backup.json", "data.tar.zst"]:
            raise Failure(f"the backup's objects in the store: {names}")

    # Cluster `origin`: S3 on moto

    def origin_created(self):
        self.kubectl("apply", "-f", "-", stdin=json.dumps(self.cluster_object("origin", 2, self.s3_parameters("origin"))))

    def origin_running(self):
        self.wait_healthy("origin", 2)
        self.wait_sidecars("origin", 2)

    def origin_archiving(self):
        primary = self.primary("origin")
        self.psql(
            NS,
            primary,
            "create table t (id serial primary key, phase text not null, at timestamptz not null default clock_timestamp());"
            " insert into t (phase) select 'before-backup' from generate_series(1, 1000)",
        )
        self.rows["before-backup"] = 1000
        segment = self.switch_and_wait_archived("origin")
        self.wait_archiving("origin")
        keys = self.s3_keys("origin/wals/")
        if not any(k.endswith(f"/{segment}.zst") for k in keys):
            raise Failure(f"{segment}.zst is not in s3://{BUCKET}/origin/wals/: {keys[:10]}")

    def origin_metrics(self):
        """The instance manager's /metrics (port 9187, through the API
        server's Pod proxy) on each instance carries the plugin's metrics: it
        reached the sidecar's socket, which it looks for once, when it starts."""

        def probe():
            missing = {}
            for pod in self.live_pods(NS, selector("origin")):
                name = pod["metadata"]["name"]
                text = self.api.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}:9187/proxy/metrics")
                # Not JSON: Kube.request hands the text back as {"message": text}.
                text = text.get("message", "") if isinstance(text, dict) else str(text)
                lines = [line for line in text.splitlines() if line.startswith("cnpgi_wal_archive_")]
                if not any(line.startswith("cnpgi_wal_archive_archived_total") for line in lines):
                    missing[name] = [line for line in text.splitlines() if "collection_error" in line and not line.startswith("#")]
            if missing:
                raise Failure(f"no cnpgi_wal_archive_archived_total in /metrics of {missing}")
            return True

        wait_for("the plugin's metrics in each instance's /metrics", probe, timeout=60, interval=3)

    def origin_backup(self):
        status = self.backup("origin", "origin-1")
        keys = self.s3_keys(f"origin/backups/{status['backupId']}/")
        if sorted(k.rsplit("/", 1)[-1] for k in keys) != ["backup.json", "data.tar.zst"]:
            raise Failure(f"the backup's objects in the bucket: {keys}")

    def origin_after_backup(self):
        primary = self.primary("origin")
        self.psql(NS, primary, "insert into t (phase) select 'after-backup' from generate_series(1, 100)")
        self.rows["after-backup"] = 100
        time.sleep(2)
        # A whole second, strictly after the last commit above, and before
        # the rows below (written 2 s later).
        self.target_time = self.psql(
            NS, primary, "select to_char(date_trunc('second', clock_timestamp() at time zone 'UTC'), 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
        )
        time.sleep(2)
        self.psql(NS, primary, "insert into t (phase) select 'after-target' from generate_series(1, 10)")
        self.rows["after-target"] = 0
        late = self.psql(NS, primary, f"select count(*) from t where phase = 'after-backup' and at >= '{self.target_time}'")
        early = self.psql(NS, primary, f"select count(*) from t where phase = 'after-target' and at <= '{self.target_time}'")
        if late != "0" or early != "0":
            raise Failure(f"the target {self.target_time} does not separate the rows: {late} after-backup rows after it, {early} after-target rows before it")
        self.switch_and_wait_archived("origin")
        print(f"  (point-in-time target {self.target_time})", flush=True)

    # Cluster `restored`: recovery from origin through the plugin

    def restored_created(self):
        if not self.target_time:
            raise Failure("no target time: the rows of origin were not written")
        obj = self.cluster_object(
            "restored",
            1,
            self.s3_parameters("restored"),
            bootstrap={"recovery": {"source": "origin", "recoveryTarget": {"targetTime": self.target_time}}},
            externalClusters=[{"name": "origin", "plugin": {"name": PLUGIN, "parameters": self.s3_parameters("origin")}}],
        )
        self.kubectl("apply", "-f", "-", stdin=json.dumps(obj))

        def job_patched():
            jobs = self.api.get(f"/apis/batch/v1/namespaces/{NS}/jobs", labelSelector="cnpg.io/cluster=restored,cnpg.io/jobRole=full-recovery")["items"]
            if not jobs:
                raise Failure("no full-recovery Job yet")
            init = jobs[0]["spec"]["template"]["spec"].get("initContainers", [])
            sidecars = [c for c in init if c["name"] == SIDECAR and c.get("restartPolicy") == "Always"]
            if not sidecars:
                raise Failure(f"the full-recovery Job has no {SIDECAR} sidecar: {[c['name'] for c in init]}")
            env = {e["name"] for e in sidecars[0].get("env", [])}
            if not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= env:
                raise Failure(f"the Job's sidecar lacks the source's credentials: {sorted(env)}")
            return True

        wait_for("the full-recovery Job, with the plugin's sidecar", job_patched, timeout=180, interval=2)

    def restored_running(self):
        self.wait_healthy("restored", 1, timeout=600)
        self.wait_sidecars("restored", 1)

    def restored_rows(self):
        primary = self.primary("restored")
        out = self.psql(NS, primary, "select phase || '=' || count(*) from t group by phase order by phase")
        have = dict(line.split("=") for line in out.splitlines())
        want = {k: str(v) for k, v in self.rows.items() if v}
        if have != want:
            raise Failure(f"rows by phase in restored: {have}, written before the target: {want}")
        ids = self.psql(NS, primary, "select count(*) = max(id) from t")
        if ids != "t":
            raise Failure("the restored rows have gaps in their ids")

    def restored_archiving(self):
        self.wait_archiving("restored")
        keys = self.s3_keys("restored/wals/")
        if not keys:
            raise Failure(f"nothing in s3://{BUCKET}/restored/wals/")

    def origin_pod_deleted(self):
        primary = self.primary("origin")
        (standby,) = [p["metadata"]["name"] for p in self.live_pods(NS, selector("origin")) if p["metadata"]["name"] != primary]
        # PostgreSQL (the instance manager) and the plugin's sidecar both stop
        # on the kubelet's SIGTERM, not at the end of CloudNativePG's 1800 s
        # grace period.
        old, took = delete_and_time(self.api, NS, standby, timeout=120)
        if took > 60:
            raise Failure(f"{standby} took {took:.0f} s to stop")
        print(f"  ({standby} stopped {took:.1f} s after its deletion)", flush=True)

        def back():
            pods = self.live_pods(NS, selector("origin"))
            if len(pods) != 2 or any(p["metadata"]["uid"] == old for p in pods):
                raise Failure(f"instance Pods {[p['metadata']['name'] for p in pods]}")
            problems = [p for pod in pods for p in self.sidecar_problems(pod)]
            if problems:
                raise Failure("; ".join(problems))
            return True

        wait_for(f"{standby} recreated with the plugin's sidecar", back, timeout=240, interval=2)
        self.wait_healthy("origin", 2)

    def explain_commands(self):
        return [
            ("get", "pods", "-A", "-o", "wide"),
            ("-n", NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", NS, "get", "clusters.postgresql.cnpg.io,backups.postgresql.cnpg.io,jobs", "-o", "wide"),
            ("-n", NS, "logs", "-l", "cnpg.io/podRole=instance", "-c", SIDECAR, "--tail=20", "--prefix"),
            ("-n", CNPG_NS, "logs", "deployment/cnpgi-wal-archive", "--tail=20"),
            ("-n", CNPG_NS, "logs", "deployment/cnpg-controller-manager", "--tail=40"),
        ]

    def run(self):
        steps = [
            ("CloudNativePG installed (config/default) and Ready", self.apply_cnpg),
            ("the wal-archive plugin's manifests applied in cnpg-system", self.apply_plugin),
            ("the wal-archive plugin is Ready and registered by CloudNativePG through its Service", self.plugin_ready),
            ("namespace with restricted Pod Security, moto's S3 server in it, a bucket", self.moto),
            ("Cluster local (the plugin's default store, on the instance's PersistentVolume) is created", self.local_created),
            ("Cluster local healthy, the plugin's sidecar injected and running beside PostgreSQL", self.local_running),
            ("Cluster local archives WAL into the store on its volume: ContinuousArchiving=True", self.local_archiving),
            ("a Backup of local with method: plugin completes, its objects in the store", self.local_backup),
            ("Cluster origin (2 instances, S3 on moto) is created", self.origin_created),
            ("Cluster origin healthy, the sidecar injected and running in both instance Pods", self.origin_running),
            ("Cluster origin archives WAL to S3: ContinuousArchiving=True, the segments in the bucket", self.origin_archiving),
            ("each origin instance's /metrics has the plugin's metrics (Metrics service over the sidecar's socket)", self.origin_metrics),
            ("a Backup of origin with method: plugin completes, its objects in the bucket", self.origin_backup),
            ("rows written after the backup, a point in time, rows after it, the WAL archived", self.origin_after_backup),
            ("Cluster restored is bootstrapped with recovery from origin through the plugin", self.restored_created),
            ("Cluster restored healthy, with the plugin's sidecar", self.restored_running),
            ("restored has every row written before the backup and after it up to the target, none after", self.restored_rows),
            ("restored archives its own WAL: ContinuousArchiving=True, objects in its own folder", self.restored_archiving),
            ("a deleted instance Pod of origin stops on SIGTERM, sidecar included, and comes back with it", self.origin_pod_deleted),
        ]
        return self.run_steps(steps, fatal=(self.apply_cnpg, self.plugin_ready))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--cnpg-manifest", required=True, help="CloudNativePG's config/default (tests/realkube/cnpg.sh manifest)")
    p.add_argument("--plugin-manifest", required=True, help="examples/wal-archive/manifests, image set")
    p.add_argument("--postgres-image", required=True, help="the instances' PostgreSQL image, present on the nodes")
    p.add_argument("--moto-image", required=True, help="an image with moto's server (python3 -m moto.server), present on the nodes")
    args = p.parse_args()
    if not args.kubeconfig:
        sys.exit("scenario_wal_archive.py: no kubeconfig (--kubeconfig or KUBECONFIG)")
    sys.exit(Scenario(args).run())


if __name__ == "__main__":
    main()
