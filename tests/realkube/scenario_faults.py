"""Scenario 4 (issue 32): the faults users meet, tried on the real cluster, with nothing lost.

The real CloudNativePG with the wal-archive plugin as its instances' sidecar
(installed as scenario 3 installs them), a Cluster `faults` archiving to S3 on its own
moto Pod, and a writer committing rows (and switching WAL segments often, so
that many segments are archived while a fault lasts). Each fault is a named
check that ends with the same proof:

* every row the writer committed is there after a point-in-time recovery to
  the latest point (a new Cluster bootstrapped from the archive through the
  plugin, no target);
* every WAL segment from the base backup's first to the last one archived is
  in the store, exactly once (one object per segment).

The faults:
1. the plugin's sidecar process killed (SIGKILL, from the node) three times
   while segments are being archived;
2. the object store unreachable for two minutes under write load (its Service
   selects no Pod): archiving fails and is retried, WAL stays in pg_wal,
   `ContinuousArchiving` turns False, then True once the store is back;
3. the node's container runtime and kubelet restarted: the Pods come back, the
   plugin is reached again, archiving resumes.
Each prints what it measured: the time to recover and the archiver's failures.

    scenario_faults.py --kubeconfig FILE --node-exec "docker exec cnpgi-control-plane" \\
        --postgres-image localhost/postgresql:15 --moto-image localhost/moto:5.2.1
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

import scenario_wal_archive as wa
from realkube import Failure, wait_for

NS = "realkube-faults"
CLUSTER = "faults"
# scenario_wal_archive's helpers (moto, backups, the archive's keys) work in
# its module's namespace: this scenario's own, so a stopped store stops only it.
wa.NS = NS


def next_segment(name):
    """The WAL segment after `name` (16 MiB segments: 256 per log file)."""
    tli, log, seg = int(name[:8], 16), int(name[8:16], 16), int(name[16:24], 16)
    seg += 1
    if seg == 0x100:
        log, seg = log + 1, 0
    return f"{tli:08X}{log:08X}{seg:08X}"


class Faults(wa.Scenario):
    title = "faults"

    def __init__(self, args):
        super().__init__(args)
        self.node_exec = shlex.split(args.node_exec)
        self.base_wal = None
        self.recoveries = 0

    # -- the writer and the node

    def primary_pod(self):
        return self.primary(CLUSTER)

    def writer(self, seconds):
        """Starts committing rows in the primary for `seconds`, one insert per
        transaction, a WAL switch every 200 rows (a few segments a minute);
        returns the process and when its loop ends in the Pod."""
        script = (
            f"end=$(( $(date +%s) + {seconds} )); "
            "while [ $(date +%s) -lt $end ]; do "
            "psql -h /controller/run -U postgres -qAt -v ON_ERROR_STOP=1 "
            "-c 'insert into ledger default values' "
            "-c 'select pg_switch_wal() from ledger having count(*) % 200 = 0' >/dev/null || sleep 1; done"
        )
        cmd = [self.kubectl_bin, "--kubeconfig", self.kubeconfig, "-n", NS, "exec", self.primary_pod(), "-c", "postgres", "--", "sh", "-c", script]
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), time.time() + seconds

    def wait_writer(self, writer):
        """Until the writer's loop has ended in the Pod: a fault may end the
        `kubectl exec` session (the container runtime restarted) while the
        loop goes on in the container, so the deadline is waited for too."""
        proc, ends = writer
        try:
            proc.wait(timeout=max(0, ends - time.time()) + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise Failure("the writer did not stop") from None
        time.sleep(max(0, ends - time.time()) + 3)

    def node(self, *args, timeout=120):
        proc = subprocess.run([*self.node_exec, *args], capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise Failure(f"on the node, `{' '.join(args)}` exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}")
        return proc.stdout.strip()

    def kill_sidecar(self):
        """SIGKILL to the plugin's sidecar process of the primary, from the
        node (as the kernel's OOM killer would)."""
        pod = self.primary_pod()
        ids = self.node("crictl", "ps", "-q", "--name", wa.SIDECAR, "--label", f"io.kubernetes.pod.name={pod}", "--state", "running").split()
        if len(ids) != 1:
            raise Failure(f"{len(ids)} running {wa.SIDECAR} containers in {pod}")
        pid = self.node("crictl", "inspect", "-o", "go-template", "--template", "{{.info.pid}}", ids[0])
        self.node("kill", "-KILL", pid)

    def archiver(self):
        row = self.psql(NS, self.primary_pod(), "select archived_count || ' ' || failed_count || ' ' || coalesce(last_archived_wal, '') from pg_stat_archiver")
        archived, failed, last = [*row.split(" "), "", ""][:3]
        return int(archived), int(failed), last

    def condition_status(self):
        c = self.condition(self.cluster(CLUSTER), "ContinuousArchiving")
        return c.get("status") if c else None

    # -- the proof

    def proof(self, fault):
        """Every committed row after a recovery to the latest point, every
        segment since the base backup in the store exactly once."""
        primary = self.primary_pod()
        last = self.switch_and_wait_archived(CLUSTER)
        rows = int(self.psql(NS, primary, "select count(*) from ledger"))
        # Exactly once, contiguous: the objects' names without the
        # compression suffix are the files PostgreSQL archived: WAL segments,
        # backup history files (<segment>.<offset>.backup) and timeline histories.
        keys = self.s3_keys(f"{CLUSTER}/wals/")
        files = [re.sub(r"\.(zst|gz|bz2|lz4|xz|snappy)$", "", os.path.basename(k)) for k in keys]
        unknown = [f for f in files if not re.fullmatch(r"[0-9A-F]{24}|[0-9A-F]{24}\.[0-9A-F]{8}\.backup|[0-9A-F]{8}\.history", f)]
        if unknown:
            raise Failure(f"objects under {CLUSTER}/wals/ that PostgreSQL did not archive: {unknown[:5]}")
        twice = sorted({f for f in files if files.count(f) > 1})
        if twice:
            raise Failure(f"files stored more than once: {twice[:5]} (keys {[k for k in keys if any(t in k for t in twice)][:6]})")
        segments = [f for f in files if len(f) == 24]
        have, missing, name = set(segments), [], self.base_wal
        while name <= last:
            if name not in have:
                missing.append(name)
            name = next_segment(name)
        if missing:
            raise Failure(f"segments missing from the store between {self.base_wal} and {last}: {missing[:8]}")
        # Recovery to the latest point, through the plugin.
        self.recoveries += 1
        name = f"{CLUSTER}-pitr-{self.recoveries}"
        self.kubectl(
            "apply", "-f", "-",
            stdin=json.dumps(self.cluster_object(
                name, 1, self.s3_parameters(name),
                bootstrap={"recovery": {"source": CLUSTER}},
                externalClusters=[{"name": CLUSTER, "plugin": {"name": wa.PLUGIN, "parameters": self.s3_parameters(CLUSTER)}}],
            )),
        )
        started = time.time()
        self.wait_healthy(name, 1, timeout=600)
        recovered = int(self.psql(NS, self.primary(name), "select count(*) from ledger"))
        self.kubectl("-n", NS, "delete", f"clusters.postgresql.cnpg.io/{name}", "--wait=false")
        if recovered != rows:
            raise Failure(f"after {fault}: {rows} rows committed, {recovered} recovered to the latest point")
        print(
            f"  ({fault}: {rows} rows committed and recovered; segments {self.base_wal}..{last} in the store once each;"
            f" recovery {time.time() - started:.0f} s)",
            flush=True,
        )

    # -- checks

    def setup(self):
        # CloudNativePG and the plugin as scenario 3 installs them (no change when it ran).
        self.apply_cnpg()
        self.apply_plugin()
        self.plugin_ready()
        self.moto()
        self.kubectl("apply", "-f", "-", stdin=json.dumps(self.cluster_object(CLUSTER, 1, self.s3_parameters(CLUSTER))))
        self.wait_healthy(CLUSTER, 1)
        self.wait_sidecars(CLUSTER, 1)
        self.psql(NS, self.primary_pod(), "create table ledger (id bigserial primary key, at timestamptz not null default clock_timestamp())")
        self.switch_and_wait_archived(CLUSTER)
        self.wait_archiving(CLUSTER)
        status = self.backup(CLUSTER, f"{CLUSTER}-base")
        self.base_wal = status["beginWal"]

    def sidecar_killed(self):
        _, failed_before, _ = self.archiver()
        proc = self.writer(50)
        for _ in range(3):
            time.sleep(12)
            restarts = self.sidecar_status().get("restartCount", 0)
            killed_at = time.time()
            self.kill_sidecar()
            self.wait_sidecar_back(restarts, killed_at)
        self.wait_writer(proc)
        archived_at = time.time()
        self.switch_and_wait_archived(CLUSTER)
        _, failed, _ = self.archiver()
        print(f"  (3 SIGKILLs: {failed - failed_before} archive attempts failed and were retried;"
              f" archiving caught up {time.time() - archived_at:.0f} s after the writer stopped)", flush=True)
        self.proof("the sidecar killed three times")

    def sidecar_status(self):
        pod = self.api.get(f"/api/v1/namespaces/{NS}/pods/{self.primary_pod()}")
        return next((s for s in pod["status"].get("initContainerStatuses", []) if s["name"] == wa.SIDECAR), {})

    def wait_sidecar_back(self, restarts, since):
        def back():
            status = self.sidecar_status()
            if status.get("restartCount", 0) <= restarts or "running" not in status.get("state", {}):
                raise Failure(f"{wa.SIDECAR}: {status.get('state')}, restarts {status.get('restartCount')} (was {restarts})")
            return True

        wait_for(f"{wa.SIDECAR} restarted by the kubelet", back, timeout=90, interval=1)
        print(f"  (sidecar running again {time.time() - since:.1f} s after its SIGKILL)", flush=True)

    def store_down(self):
        """The store unreachable for two minutes: its Service selects no Pod
        (moto keeps its objects in memory, so its Pod is left running: the
        store is down for its clients, its data is not lost)."""
        _, failed_before, _ = self.archiver()
        proc = self.writer(150)
        time.sleep(10)
        self.kubectl("-n", NS, "patch", "service/moto", "--type", "merge", "-p", json.dumps({"spec": {"selector": {"app.kubernetes.io/name": "moto-down"}}}))
        down_at = time.time()

        def failing():
            if self.condition_status() != "False":
                raise Failure(f"ContinuousArchiving is {self.condition_status()}")
            return True

        wait_for("ContinuousArchiving=False while the store is down", failing, timeout=120, interval=2)
        false_after = time.time() - down_at
        remaining = 120 - (time.time() - down_at)
        if remaining > 0:
            time.sleep(remaining)
        pending = int(self.psql(NS, self.primary_pod(), "select count(*) from pg_ls_archive_statusdir() where name like '%.ready'"))
        if pending == 0:
            raise Failure("no segment waits in pg_wal after two minutes without the store")
        self.kubectl("-n", NS, "patch", "service/moto", "--type", "merge", "-p", json.dumps({"spec": {"selector": {"app.kubernetes.io/name": "moto"}}}))
        up_at = time.time()
        self.wait_writer(proc)
        self.wait_archiving(CLUSTER)
        self.switch_and_wait_archived(CLUSTER)
        _, failed, _ = self.archiver()
        print(
            f"  (store down {up_at - down_at:.0f} s: ContinuousArchiving False after {false_after:.0f} s, {pending} segments"
            f" waiting in pg_wal, {failed - failed_before} failed attempts; caught up {time.time() - up_at:.0f} s after it came back)",
            flush=True,
        )
        self.proof("the store down for two minutes")

    def runtime_restarted(self):
        # Every Pod of the node is affected: other scenarios running side by
        # side finish first.
        if self.args.node_alone_after:
            wait_for(
                f"the other scenarios done ({self.args.node_alone_after})",
                lambda: os.path.exists(self.args.node_alone_after),
                timeout=1200,
                interval=2,
            )
        proc = self.writer(40)
        time.sleep(10)
        restarted_at = time.time()
        self.node("systemctl", "restart", "containerd")
        self.node("systemctl", "restart", "kubelet")
        self.wait_writer(proc)

        def back():
            pods = self.live_pods(NS, wa.selector(CLUSTER))
            if len(pods) != 1 or not self.ready(pods[0]):
                raise Failure(f"instance Pods {[(p['metadata']['name'], self.ready(p)) for p in pods]}")
            return True

        wait_for("the instance Pod Ready after the runtime's restart", back, timeout=240, interval=2)

        def kubelet_answers():
            self.kubectl("-n", NS, "exec", self.primary_pod(), "-c", "postgres", "--", "true", timeout=30)
            return True

        # The Pod's status is the API server's; exec goes through the kubelet itself.
        wait_for("the kubelet answers exec again", kubelet_answers, timeout=120, interval=2)
        self.wait_healthy(CLUSTER, 1)
        self.switch_and_wait_archived(CLUSTER)
        self.wait_archiving(CLUSTER)
        print(f"  (containerd and kubelet restarted: archiving again {time.time() - restarted_at:.0f} s later)", flush=True)
        self.proof("the container runtime and kubelet restarted")

    def explain_commands(self):
        return [
            ("get", "pods", "-A", "-o", "wide"),
            ("-n", NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", NS, "get", "clusters.postgresql.cnpg.io,backups.postgresql.cnpg.io", "-o", "wide"),
            ("-n", NS, "logs", "-l", "cnpg.io/podRole=instance", "-c", wa.SIDECAR, "--tail=30", "--prefix"),
        ]

    def run(self):
        steps = [
            ("a Cluster archiving to its own S3 store, a base backup", self.setup),
            ("the plugin's sidecar SIGKILLed three times while archiving: nothing lost", self.sidecar_killed),
            ("the object store down for two minutes under writes: ContinuousArchiving False then True, nothing lost", self.store_down),
            ("the node's containerd and kubelet restarted: Pods back, archiving resumes, nothing lost", self.runtime_restarted),
        ]
        return self.run_steps(steps, fatal=(self.setup,))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--node-exec", required=True, help="the command prefix that runs a command on the node (docker exec <node>)")
    p.add_argument("--node-alone-after", help="a file whose existence says the scenarios beside this one ended (before the runtime is restarted)")
    p.add_argument("--cnpg-manifest", required=True, help="CloudNativePG's config/default (tests/realkube/cnpg.sh manifest)")
    p.add_argument("--plugin-manifest", required=True, help="examples/wal-archive/manifests, image set")
    p.add_argument("--postgres-image", required=True, help="the instances' PostgreSQL image, present on the nodes")
    p.add_argument("--moto-image", required=True, help="an image with moto's server, present on the nodes")
    args = p.parse_args()
    if not args.kubeconfig:
        sys.exit("scenario_faults.py: no kubeconfig (--kubeconfig or KUBECONFIG)")
    sys.exit(Faults(args).run())


if __name__ == "__main__":
    main()
