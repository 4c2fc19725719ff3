#!/usr/bin/env python3
"""WAL archiving under the real CloudNativePG: the wal-archive plugin beside
plugin-barman-cloud, on the same kind cluster, S3 store (moto) and load.

Runs against a kind cluster the realkube suite brought up and kept, with both
plugins deployed in cnpg-system by their scenarios:

    sudo env RK_KEEP=1 RK_SCENARIOS="wal-archive barman-cloud" bash tests/realkube/run.sh
    sudo python3 examples/wal-archive/bench/under_cnpg.py            # KUBECONFIG: /tmp/cnpgi-realkube/kubeconfig
    sudo bash tests/realkube/down.sh                                  # the cluster removed

For each configuration (a row), in a namespace of its own with a moto:
  1. a fresh 1-instance Cluster (the suite's PostgreSQL 15 image) archiving
     through the plugin, healthy, ContinuousArchiving=True;
  2. the store taken down: moto scaled to 0 (its connections cut) and its
     Service selecting no Pod;
  3. `pgbench -i -s SCALE` in the primary: archiving cannot succeed, so a
     backlog of ready segments accumulates, counted as the
     pg_wal/archive_status/*.ready files (`kubectl exec`, in the postgres
     container);
  4. moto back (its Pod Ready, the bucket made again, then the Service
     selecting it), `pgbench -c CLIENTS` TPC-B load started inside the primary
     at once, and the time until pg_stat_archiver's archived_count has grown
     by the backlog: segments/s, the segments archived after the first one
     seen (0.5 s polls of pg_stat_archiver) over the time since (the archiver
     may be sleeping after its failures, up to a minute; the load's new
     segments wake it), and the seconds from the store's return;
  5. pg_stat_archiver's failed_count after the store's return, and the sidecar
     container's peak memory: its cgroup's memory.max_usage_in_bytes (cgroup
     v1, as on this project's machines) or memory.peak (v2), read with
     `kubectl exec` in the sidecar (the sidecar's processes, page cache
     charged to it included).
Rows: the wal-archive plugin (one segment per archive_command: CloudNativePG
calls it once per segment; zstd level 1, its default), plugin-barman-cloud
with wal.maxParallel 1 and with 8 (zstd, barman's default level). A markdown
table row is printed per configuration. --smoke: SCALE 1 (the CI smoke test
is tests/realkube/scenario_barman_cloud.py).
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tests", "realkube"))

import scenario_barman_cloud as bc  # noqa: E402
import scenario_wal_archive as wa  # noqa: E402
from realkube import Failure, wait_for  # noqa: E402

NS = "cnpgi-bench-under-cnpg"
PGDATA = "/var/lib/postgresql/data/pgdata"
MOTO_SELECTOR = {"app.kubernetes.io/name": "moto"}

# scenario_wal_archive's helpers work in its module's namespace: this one's.
wa.NS = NS

ROWS = {
    "wal-archive": ("wal-archive (one segment per call, zstd 1)", "plugin-wal-archive", None),
    "barman-1": ("plugin-barman-cloud v0.14.0, maxParallel 1 (zstd)", "plugin-barman-cloud", 1),
    "barman-8": ("plugin-barman-cloud v0.14.0, maxParallel 8 (zstd)", "plugin-barman-cloud", 8),
}


class Bench(wa.Scenario):
    title = "under-cnpg"

    def deployed(self):
        for name in ("cnpgi-wal-archive", "barman-cloud"):
            d = self.api.maybe_get(f"/apis/apps/v1/namespaces/{bc.CNPG_NS}/deployments/{name}")
            if not d or not (d.get("status") or {}).get("availableReplicas"):
                raise Failure(
                    f"no available Deployment {bc.CNPG_NS}/{name}: bring the cluster up with"
                    ' RK_KEEP=1 RK_SCENARIOS="wal-archive barman-cloud" tests/realkube/run.sh'
                )

    def archiver(self, cluster):
        row = self.psql(NS, self.primary(cluster), bc.ARCHIVER_SQL)
        archived, failed, last = [*row.split(" "), ""][:3]
        return int(archived), int(failed), last

    def ready_segments(self, pod):
        out = self.kubectl("-n", NS, "exec", pod, "-c", "postgres", "--", "find", f"{PGDATA}/pg_wal/archive_status", "-name", "*.ready")
        return len(out.split())

    def sidecar_peak(self, pod, container):
        """(bytes, which file) of the sidecar container's cgroup peak."""
        for path in ("/sys/fs/cgroup/memory/memory.max_usage_in_bytes", "/sys/fs/cgroup/memory.peak"):
            try:
                out = self.kubectl("-n", NS, "exec", pod, "-c", container, "--", "cat", path)
                return int(out.strip()), os.path.basename(path)
            except (Failure, ValueError):
                continue
        return None, None

    def store(self, up):
        if up:
            self.kubectl("-n", NS, "scale", "deployment/moto", "--replicas=1")
            self.rollout(NS, "moto")
            # moto keeps its objects in memory: the bucket is made again before
            # the Service selects the new Pod (no archive attempt sees it missing).
            self.moto_python(f"s3.create_bucket(Bucket='{wa.BUCKET}')")
            self.kubectl("-n", NS, "patch", "service/moto", "--type", "merge", "-p", json.dumps({"spec": {"selector": MOTO_SELECTOR}}))
            self.wait_endpoints(NS, "moto", "app.kubernetes.io/name=moto")
        else:
            self.kubectl(
                "-n", NS, "patch", "service/moto", "--type", "merge", "-p", json.dumps({"spec": {"selector": {"app.kubernetes.io/name": "moto-down"}}})
            )
            self.kubectl("-n", NS, "scale", "deployment/moto", "--replicas=0")

            def gone():
                if self.pods(NS, "app.kubernetes.io/name=moto"):
                    raise Failure("moto's Pod still there")
                return True

            wait_for("moto's Pod gone", gone, timeout=120, interval=1)

    def cluster_spec(self, key, name):
        _, _, max_parallel = ROWS[key]
        if key == "wal-archive":
            obj = self.cluster_object(name, 1, self.s3_parameters(name), storage={"size": self.args.storage})
            return [obj]
        store = f"store-{name}"
        return [bc.object_store(store, NS, max_parallel=max_parallel), bc.cluster_object(name, NS, self.args.postgres_image, store, self.args.storage)]

    def row(self, key):
        """The row's measurement; its Cluster deleted after it whatever
        happened (the store up again first, so that its last segments go)."""
        name = f"bench-{key}"
        try:
            return self.measure(key, name)
        finally:
            moto = self.api.get(f"/apis/apps/v1/namespaces/{NS}/deployments/moto")
            if not moto["spec"].get("replicas"):
                self.store(up=True)
            self.kubectl("-n", NS, "delete", "clusters.postgresql.cnpg.io", name, "--ignore-not-found", "--wait=true", timeout=300)
            if key != "wal-archive":
                self.kubectl("-n", NS, "delete", "objectstores.barmancloud.cnpg.io", f"store-{name}", "--ignore-not-found", "--wait=true", timeout=120)

    def measure(self, key, name):
        label, sidecar, _ = ROWS[key]
        t0 = time.monotonic()
        self.apply_objects(*self.cluster_spec(key, name))
        self.wait_healthy(name, 1, timeout=600)
        self.wait_archiving(name)
        primary = self.primary(name)
        self.store(up=False)
        started = time.monotonic()
        self.kubectl(
            "-n", NS, "exec", primary, "-c", "postgres", "--",
            "pgbench", "-h", "/controller/run", "-U", "postgres", "-i", "-q", "-s", str(self.args.scale), "postgres",
            timeout=3600,
        )  # fmt: skip
        # The last segment pgbench wrote into ready too (at SCALE 1, the only one).
        self.psql(NS, primary, "select pg_switch_wal()")
        init_s = time.monotonic() - started
        backlog = self.ready_segments(primary)
        archived0, _, _ = self.archiver(name)
        print(f"  ({label}: pgbench -i -s {self.args.scale} in {init_s:.0f} s, {backlog} segments ready, archived_count {archived0})", flush=True)
        if backlog == 0:
            raise Failure("no backlog: archiving was not stopped")
        load = subprocess.Popen(
            [self.kubectl_bin, "--kubeconfig", self.kubeconfig, "-n", NS, "exec", primary, "-c", "postgres", "--",
             "pgbench", "-h", "/controller/run", "-U", "postgres", "-c", str(self.args.clients), "-j", str(self.args.clients),
             "-T", "3600", "-n", "postgres"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            self.store(up=True)
            up_at = time.monotonic()
            # Attempts that failed while the store was down are not counted.
            _, failed_up, _ = self.archiver(name)
            first_at, archived_first = None, None
            deadline = up_at + self.args.timeout
            while True:
                archived, failed, _ = self.archiver(name)
                now = time.monotonic()
                if first_at is None and archived > archived0:
                    first_at, archived_first = now, archived
                if archived >= archived0 + backlog:
                    done_at = now
                    break
                if now > deadline:
                    raise Failure(f"archived_count {archived}, {archived - archived0} of {backlog} after {self.args.timeout} s")
                time.sleep(0.5)
        finally:
            # pgbench's clients ended from the server (the image has no pkill); kubectl exec then returns.
            try:
                self.psql(NS, primary, "select count(pg_terminate_backend(pid)) from pg_stat_activity where application_name = 'pgbench'")
            except Failure as e:
                print(f"  (could not stop pgbench: {e})", flush=True)
            try:
                load.wait(timeout=30)
            except subprocess.TimeoutExpired:
                load.kill()
        peak, peak_file = self.sidecar_peak(primary, sidecar)
        result = {
            "label": label,
            "backlog": backlog,
            "catch_up_s": done_at - first_at,
            "from_up_s": done_at - up_at,
            # the segments archived after the first one seen, over the time since
            "rate": (archived - archived_first) / (done_at - first_at) if done_at > first_at else None,
            "failed": failed - failed_up,
            "peak_mib": peak / 2**20 if peak is not None else None,
            "peak_file": peak_file,
            "setup_s": started - t0,
            "init_s": init_s,
        }
        return result


def fmt_row(r):
    peak = f"{r['peak_mib']:.0f} MiB" if r["peak_mib"] is not None else "n/a"
    rate = f"{r['rate']:.2f}" if r["rate"] is not None else "n/a"
    return f"| {r['label']} | {r['backlog']} | {r['catch_up_s']:.1f} | {rate} | {r['from_up_s']:.1f} | {r['failed']} | {peak} |"


HEADER = (
    "| configuration | backlog (segments) | s from first archived to backlog done | segments/s (after the first)"
    " | s from store back to backlog done | failed_count after store back | sidecar peak memory |\n"
    "|---|---|---|---|---|---|---|"
)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", "/tmp/cnpgi-realkube/kubeconfig"))
    p.add_argument("--scale", type=int, default=int(os.environ.get("SCALE", "100")), help="pgbench -i -s (default 100, or $SCALE)")
    p.add_argument("--clients", type=int, default=2, help="pgbench -c during the catch-up (default 2)")
    p.add_argument("--rows", default="wal-archive,barman-1,barman-8", help=f"comma-separated, of {', '.join(ROWS)}")
    p.add_argument("--storage", default="8Gi", help="each Cluster's storage.size (local-path does not enforce it)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds allowed for a catch-up")
    p.add_argument("--postgres-image", default="localhost/postgresql:15")
    p.add_argument("--moto-image", default="localhost/moto:5.2.1")
    p.add_argument("--smoke", action="store_true", help="SCALE 1: the bench's own path only")
    p.add_argument("--keep-namespace", action="store_true")
    args = p.parse_args()
    if args.smoke:
        args.scale = 1
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        sys.exit(f"under_cnpg.py: unknown rows {unknown} (of {list(ROWS)})")
    if "KUBECTL" not in os.environ:
        built = os.path.expanduser("~/.cache/cnpgi-e2e/kubectl-v1.34.4/kubectl")
        if os.access(built, os.X_OK):
            os.environ["KUBECTL"] = built
    bench = Bench(args)
    started = time.monotonic()
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    try:
        bench.deployed()
        if bench.api.maybe_get(f"/api/v1/namespaces/{NS}"):  # a previous run's: its moto and Clusters
            bench.kubectl("delete", "namespace", NS, "--wait=false")

            def gone():
                if bench.api.maybe_get(f"/api/v1/namespaces/{NS}"):
                    raise Failure(f"namespace {NS} still there")
                return True

            wait_for(f"the previous run's namespace {NS} gone", gone, timeout=600, interval=2)
        bench.moto()
    except Failure as e:
        sys.exit(f"under_cnpg.py: {e}")
    results, rc = [], 0
    for key in rows:
        t = time.monotonic()
        try:
            r = bench.row(key)
        except (Failure, subprocess.TimeoutExpired) as e:
            print(f"FAIL {key}: {e}", flush=True)
            rc = 1
            continue
        results.append(r)
        print(f"  ({key}: {time.monotonic() - t:.0f} s in all; peak from {r['peak_file']})", flush=True)
        print(fmt_row(r), flush=True)
    if not args.keep_namespace:
        bench.kubectl("delete", "namespace", NS, "--wait=false")
    print(
        f"\nWAL archiving under CloudNativePG v1.30.0 in kind, {date}: pgbench -i -s {args.scale} written with the store down,"
        f" then caught up under pgbench -c {args.clients} (TPC-B); moto 5.2.1 in the cluster ({time.monotonic() - started:.0f} s in all)\n"
    )
    print(HEADER)
    for r in results:
        print(fmt_row(r))
    return rc


if __name__ == "__main__":
    sys.exit(main())
