"""Scenario 4 (issue 32): the faults users meet, tried on the real cluster, with nothing lost.

The real CloudNativePG with the wal-archive plugin as its instances' sidecar
(installed as scenario 3 installs them), a Cluster `faults` archiving to S3 on its own
moto Pod, and a writer committing rows (and switching WAL segments often, so
that many segments are archived while a fault lasts), each row naming the
fault it was written under. Each fault is a named check of how archiving
behaves through it; after the last one, one proof that nothing was lost:

* every row the writer committed is there after a point-in-time recovery to
  the latest point (a new Cluster bootstrapped from the archive through the
  plugin, no target), counted per fault: a loss names the fault;
* every WAL segment from the base backup's first to the last one archived is
  in the store, exactly once (one object per segment).

One proof, not one per fault: each recovery replays every segment since the
base backup, so a proof per fault cost a recovery per fault (five in a run,
about 50 s and much of the kind node's CPU each) for what the last one
proves as well: a row or segment a fault lost is missing at the end too.

The faults:
1. the plugin's sidecar process killed (SIGKILL, from the node) three times
   while segments are being archived;
2. the object store unreachable for two minutes under write load (its Service
   selects no Pod): archiving fails and is retried, WAL stays in pg_wal,
   `ContinuousArchiving` turns False, then True once the store is back;
3. the store's volume full (moto's objects on a memory-backed emptyDir the
   kubelet mounts as a tmpfs of its sizeLimit, filled by a file): every PUT
   fails with ENOSPC and moto answers 500 keeping no object; archiving fails
   with that error and is retried, WAL stays in pg_wal; the file removed,
   archiving resumes;
4. the plugin's server and client certificates renewed by cert-manager (new
   keys) under writes: the plugin takes them without a restart once the
   kubelet refreshes its mounted Secrets (the window in which CloudNativePG's
   calls to it fail, measured), archiving is not affected;
5. the node's container runtime and kubelet restarted: the Pods come back, the
   plugin is reached again, archiving resumes.
Each prints what it measured: the time to recover and the archiver's failures.
The operator-side faults (its leader deleted mid-roll, the network to a plugin
cut) are in scenario_operator.py; the local store's volume full is also tried
on a real PostgreSQL in examples/wal-archive/tests/postgres.sh.

    scenario_faults.py --kubeconfig FILE --node-exec "docker exec cnpgi-control-plane" \\
        --postgres-image localhost/postgresql:15 --moto-image localhost/moto:5.2.1
"""

import argparse
import base64
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import scenario_wal_archive as wa
from realkube import Failure, wait_for

NS = "realkube-faults"
CLUSTER = "faults"
# scenario_wal_archive's helpers (moto, backups, the archive's keys) work in
# its module's namespace: this scenario's own, so a stopped store stops only it.
wa.NS = NS

# The size of moto's tmpfs: the objects of every check fit (they are
# compressed WAL segments and one base backup), and filling the rest costs
# that much memory for a moment.
SPILL = "512Mi"
SPILL_BYTES = 512 << 20

# Run in moto's container: writes zeros to /spill/filler until not one byte
# is left (the last blocks smaller), prints the bytes still available.
FILL_SPILL = """
import errno, os
with open('/spill/filler', 'wb', buffering=0) as f:
    for size in (1 << 20, 1 << 16, 1 << 12, 1):
        block = bytes(size)
        try:
            while True:
                f.write(block)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
s = os.statvfs('/spill')
print(s.f_bavail * s.f_frsize)
"""


# The writer's loop (Faults.writer): until the epoch `until`, a row per
# transaction naming the fault, a WAL switch every 200 rows, 20 ms apart.
WRITE_LEDGER = """
create procedure write_ledger(until double precision, during text) language plpgsql as $$
declare n int := 0;
begin
  while extract(epoch from clock_timestamp()) < until loop
    insert into ledger (fault) values (during);
    commit;
    n := n + 1;
    if n % 200 = 0 then perform pg_switch_wal(); end if;
    perform pg_sleep(0.02);
  end loop;
end $$
"""


# The plugin's cert-manager Certificates and their Secrets (examples/wal-archive/manifests).
SERVER_CERTIFICATE, SERVER_SECRET = "cnpgi-wal-archive-server", "cnpgi-wal-archive-server-tls"
CLIENT_CERTIFICATE, CLIENT_SECRET = "cnpgi-wal-archive-client", "cnpgi-wal-archive-client-tls"


def pem_der(pem):
    """The first certificate of a PEM bundle, as DER."""
    return ssl.PEM_cert_to_DER_cert(pem[: pem.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")])


def restart_count(pod):
    """Container restarts of a Pod, all containers."""
    return sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))


def tls_handshake(port, client_cert, client_key):
    """Connects to 127.0.0.1:port as a CNPG-I client with this certificate:
    TLS 1.3, ALPN h2. Returns the server's certificate (DER) once the server
    has accepted the client's (its HTTP/2 SETTINGS frame read); raises OSError
    (ssl.SSLError among them) otherwise. The server's certificate is compared
    by the caller, not verified here."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    with tempfile.TemporaryDirectory() as d:
        cert, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        for path, pem in ((cert, client_cert), (key, client_key)):
            with open(path, "w") as f:
                f.write(pem)
        ctx.load_cert_chain(cert, key)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw, server_hostname="cnpgi-wal-archive") as tls:
        served = tls.getpeercert(binary_form=True)
        tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
        frame = tls.recv(9)
        if len(frame) < 9 or frame[3] != 4:
            raise ConnectionError(f"no HTTP/2 SETTINGS frame from the plugin (got {frame!r})")
        return served


def next_segment(name):
    """The WAL segment after `name` (16 MiB segments: 256 per log file)."""
    tli, log, seg = int(name[:8], 16), int(name[8:16], 16), int(name[16:24], 16)
    seg += 1
    if seg == 0x100:
        log, seg = log + 1, 0
    return f"{tli:08X}{log:08X}{seg:08X}"


class Faults(wa.Scenario):
    title = "faults"
    MOTO_SPILL = SPILL

    def __init__(self, args):
        super().__init__(args)
        self.base_wal = None

    # -- the writer and the node

    def primary_pod(self):
        return self.primary(CLUSTER)

    def writer(self, seconds, fault):
        """Starts committing rows in the primary for `seconds`, each naming
        `fault`: one session inserting a row per transaction (about 40 a second), a WAL switch
        every 200 rows (about 12 segments a minute), started again if its
        connection is lost; returns the process and when its loop ends in
        the Pod. One session, not a psql per row: the node's two cores are
        shared with the other scenarios."""
        script = (
            f"end=$(( $(date +%s) + {seconds} )); "
            "while [ $(date +%s) -lt $end ]; do "
            f"psql -h /controller/run -U postgres -qAt -v ON_ERROR_STOP=1 -c \"call write_ledger($end, '{fault}')\" >/dev/null || sleep 1; done"
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

    def kill_sidecar(self):
        """SIGKILL to the plugin's sidecar process of the primary, from the
        node (as the kernel's OOM killer would)."""
        pod = self.primary_pod()
        ids = self.node(
            "crictl", "ps", "-q", "--name", wa.SIDECAR, "--state", "running",
            # The Pod's name is the Cluster's, in each namespace a run of this scenario uses.
            "--label", f"io.kubernetes.pod.name={pod}", "--label", f"io.kubernetes.pod.namespace={NS}",
        ).split()  # fmt: skip
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

    def rows_per_fault(self, pod):
        """{fault: rows} of the ledger in the Pod's PostgreSQL, in the order they were written."""
        out = self.psql(NS, pod, "select fault || ' ' || count(*) from ledger group by fault order by min(id)")
        return {fault: int(n) for fault, n in (line.split(" ") for line in out.splitlines() if line)}

    def proof(self):
        """After the faults: every committed row after a recovery to the
        latest point (counted per fault), every segment since the base backup
        in the store exactly once. The recovery Cluster's Pods are patched by
        the plugin: after a rotation, CloudNativePG's calls work with the new
        pins."""
        primary = self.primary_pod()
        last = self.switch_and_wait_archived(CLUSTER)
        committed = self.rows_per_fault(primary)
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
        name = f"{CLUSTER}-pitr"
        self.kubectl(
            "apply", "-f", "-",
            stdin=json.dumps(self.cluster_object(
                name, 1, self.s3_parameters(name),
                bootstrap={"recovery": {"source": CLUSTER}},
                externalClusters=[{"name": CLUSTER, "plugin": {"name": wa.PLUGIN, "parameters": self.s3_parameters(CLUSTER)}}],
            )),
        )  # fmt: skip
        started = time.time()
        self.wait_healthy(name, 1, timeout=600)
        recovered = self.rows_per_fault(self.primary(name))
        self.kubectl("-n", NS, "delete", f"clusters.postgresql.cnpg.io/{name}", "--wait=false")
        lost = [f"{fault}: {n} rows committed, {recovered.get(fault, 0)} recovered" for fault, n in committed.items() if recovered.get(fault, 0) != n]
        lost += [f"{fault}: {n} rows recovered, none committed" for fault, n in recovered.items() if fault not in committed]
        if lost:
            raise Failure(f"after a recovery to the latest point: {'; '.join(lost)}")
        per_fault = ", ".join(f"{n} during {fault}" for fault, n in committed.items())
        print(
            f"  (rows committed and recovered: {per_fault}; segments {self.base_wal}..{last} in the store once each; recovery {time.time() - started:.0f} s)",
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
        self.psql(
            NS, self.primary_pod(),
            "create table ledger (id bigserial primary key, fault text not null, at timestamptz not null default clock_timestamp())",
        )  # fmt: skip
        self.psql(NS, self.primary_pod(), WRITE_LEDGER)
        self.switch_and_wait_archived(CLUSTER)
        self.wait_archiving(CLUSTER)
        status = self.backup(CLUSTER, f"{CLUSTER}-base")
        self.base_wal = status["beginWal"]

    def sidecar_killed(self):
        _, failed_before, _ = self.archiver()
        proc = self.writer(50, "sidecar")
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
        print(
            f"  (3 SIGKILLs: {failed - failed_before} archive attempts failed and were retried;"
            f" archiving caught up {time.time() - archived_at:.0f} s after the writer stopped)",
            flush=True,
        )

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
        proc = self.writer(150, "store-down")
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

    def moto_exec(self, *command):
        pod = self.api.get(f"/api/v1/namespaces/{NS}/pods?labelSelector=app.kubernetes.io/name%3Dmoto")["items"][0]["metadata"]["name"]
        return self.kubectl("-n", NS, "exec", pod, "-c", "moto", "--", *command)

    def spill_size(self):
        """(size, available) of moto's /spill, in bytes."""
        out = self.moto_exec("python3", "-c", "import os; s = os.statvfs('/spill'); print(s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize)")
        size, available = (int(n) for n in out.split())
        return size, available

    def store_volume_full(self):
        """The store's volume full under writes: every PUT fails with ENOSPC,
        moto answers 500 and keeps no object (no torn object: the proof reads
        every segment back), archiving fails with that error and is retried;
        space freed, it resumes."""
        size, _ = self.spill_size()
        if size > SPILL_BYTES * 1.05:
            # A tmpfs not sized by the kubelet would take the node's memory.
            raise Failure(f"moto's /spill is {size} bytes, not the {SPILL} of its sizeLimit: not filling it")
        _, failed_before, _ = self.archiver()
        proc = self.writer(100, "volume-full")
        time.sleep(10)
        left = int(self.moto_exec("python3", "-c", FILL_SPILL))
        full_at = time.time()
        if left != 0:
            raise Failure(f"moto's /spill still has {left} bytes after filling it")

        def failing():
            c = self.condition(self.cluster(CLUSTER), "ContinuousArchiving") or {}
            _, failed, _ = self.archiver()
            if c.get("status") != "False" or failed < failed_before + 2:
                raise Failure(f"ContinuousArchiving {c.get('status')}, {failed - failed_before} failed attempts")
            return c.get("message", "")

        message = wait_for("archiving failing on the full volume", failing, timeout=120, interval=2)
        false_after = time.time() - full_at
        if not re.search(r"\b500\b|Internal Server Error|InternalError", message):
            raise Failure(f"ContinuousArchiving's message does not say the store failed the upload: {message!r}")
        time.sleep(max(0, 40 - (time.time() - full_at)))
        pending = int(self.psql(NS, self.primary_pod(), "select count(*) from pg_ls_archive_statusdir() where name like '%.ready'"))
        if pending == 0:
            raise Failure("no segment waits in pg_wal while the store's volume is full")
        self.moto_exec("python3", "-c", "import os; os.remove('/spill/filler')")
        freed_at = time.time()
        self.wait_writer(proc)
        self.wait_archiving(CLUSTER)
        self.switch_and_wait_archived(CLUSTER)
        _, failed, _ = self.archiver()
        print(
            f"  (volume full {freed_at - full_at:.0f} s: ContinuousArchiving False after {false_after:.0f} s ({message[:160]!r}),"
            f" {pending} segments waiting in pg_wal, {failed - failed_before} failed attempts;"
            f" caught up {time.time() - freed_at:.0f} s after the space was freed)",
            flush=True,
        )

    def certificates_rotated(self):
        """cert-manager renews the plugin's server and client certificates
        (new keys: rotationPolicy Always) while rows are written. CloudNativePG
        pins the new Secrets at once; the plugin Pod sees them when the kubelet
        refreshes its mounted Secrets and re-reads them on its next connection,
        without a restart. Between the two, calls from the operator to the
        plugin fail: the documented window. Archiving (over the sidecar's
        Unix socket) is not affected at all."""
        # The wal-archive scenario calls the same plugin: rotate once it ended.
        self.wait_files("the wal-archive scenario done", self.args.plugin_alone_after)
        (pod,) = self.live_pods(wa.CNPG_NS, "app.kubernetes.io/name=cnpgi-wal-archive")
        restarts = restart_count(pod)
        old = {name: self.secret_pems(name) for name in (SERVER_SECRET, CLIENT_SECRET)}
        plugin = pod["metadata"]["name"]
        # The probe works: the current pins connect.
        served = self.handshake(plugin, *old[CLIENT_SECRET][:2])
        if served != pem_der(old[SERVER_SECRET][0]):
            raise Failure("before the rotation, the plugin serves a certificate other than its Secret's")
        _, failed_before, _ = self.archiver()
        proc = self.writer(45, "certificates")
        time.sleep(5)
        for certificate in (SERVER_CERTIFICATE, CLIENT_CERTIFICATE):
            self.renew(wa.CNPG_NS, certificate)

        def renewed():
            pems = {name: self.secret_pems(name) for name in (SERVER_SECRET, CLIENT_SECRET)}
            same = [name for name in pems if pems[name][0] == old[name][0] or pems[name][1] == old[name][1]]
            if same:
                raise Failure(f"certificate or key unchanged in {same}")
            return pems

        new = wait_for("cert-manager issued new certificates and keys into both Secrets", renewed, timeout=90, interval=1)
        rotated_at = time.time()
        server_der = pem_der(new[SERVER_SECRET][0])

        def serves_new():
            try:
                served = self.handshake(plugin, *new[CLIENT_SECRET][:2])
            except OSError as e:
                raise Failure(f"the new client certificate is not accepted yet: {e}") from e
            if served != server_der:
                raise Failure("the plugin still serves its previous certificate")
            return True

        wait_for("the plugin serves the new certificate and accepts the new client certificate", serves_new, timeout=240, interval=1)
        window = time.time() - rotated_at
        try:
            self.handshake(plugin, *old[CLIENT_SECRET][:2])
        except OSError:
            pass
        else:
            raise Failure("after the rotation, the plugin still accepts the previous client certificate")
        (after,) = self.live_pods(wa.CNPG_NS, "app.kubernetes.io/name=cnpgi-wal-archive")
        restarts_after = restart_count(after)
        if after["metadata"]["uid"] != pod["metadata"]["uid"] or restarts_after != restarts:
            names = f"{pod['metadata']['name']} -> {after['metadata']['name']}"
            raise Failure(f"the plugin Pod was restarted or replaced ({names}, restarts {restarts} -> {restarts_after})")
        self.wait_writer(proc)
        self.switch_and_wait_archived(CLUSTER)
        _, failed, _ = self.archiver()
        if failed != failed_before:
            raise Failure(f"{failed - failed_before} archive attempts failed during the rotation (the sidecar's socket needs no certificate)")
        print(
            f"  (certificates rotated: the plugin took the new ones {window:.0f} s after their Secrets changed, without a restart; no archive attempt failed)",
            flush=True,
        )

    def handshake(self, pod, client_cert, client_key):
        """tls_handshake with the plugin Pod's gRPC port, through a `kubectl
        port-forward` of its own (kubectl ends a port-forward whose connection
        the Pod reset, as the plugin does when it refuses a certificate)."""
        with self.port_forward(wa.CNPG_NS, f"pod/{pod}", 9090) as port:
            return tls_handshake(port, client_cert, client_key)

    def secret_pems(self, name):
        data = self.api.get(f"/api/v1/namespaces/{wa.CNPG_NS}/secrets/{name}")["data"]
        return base64.b64decode(data["tls.crt"]).decode(), base64.b64decode(data["tls.key"]).decode()

    def renew(self, ns, certificate):
        """What `cmctl renew` does: the Certificate's Issuing condition set."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {"type": "Issuing", "status": "True", "reason": "ManuallyTriggered", "message": "renewal asked by scenario_faults.py"}
        condition["lastTransitionTime"] = now
        self.kubectl("-n", ns, "patch", f"certificates.cert-manager.io/{certificate}", "--subresource=status", "--type=json",
                     "-p", json.dumps([{"op": "add", "path": "/status/conditions/-", "value": condition}]))  # fmt: skip

    def wait_files(self, what, files, timeout=1200):
        if files:
            wait_for(f"{what} ({' '.join(files)})", lambda: all(os.path.exists(f) for f in files), timeout=timeout, interval=2)

    def runtime_restarted(self):
        # Every Pod of the node is affected: other scenarios running side by
        # side finish first.
        self.wait_files("the other scenarios done", self.args.node_alone_after)
        proc = self.writer(40, "runtime")
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

    def explain_commands(self):
        return [
            ("get", "pods", "-A", "-o", "wide"),
            ("-n", NS, "get", "events", "--sort-by=.lastTimestamp"),
            ("-n", NS, "get", "clusters.postgresql.cnpg.io,backups.postgresql.cnpg.io", "-o", "wide"),
            ("-n", NS, "logs", "-l", "cnpg.io/podRole=instance", "-c", wa.SIDECAR, "--tail=30", "--prefix"),
        ]

    def run(self):
        faults = {
            "sidecar": ("the plugin's sidecar SIGKILLed three times while archiving: retried, caught up", self.sidecar_killed),
            "store-down": (
                "the object store down for two minutes under writes: ContinuousArchiving False then True",
                self.store_down,
            ),
            "volume-full": (
                "the store's volume full under writes: uploads refused, no torn object, archiving resumes once freed",
                self.store_volume_full,
            ),
            "certificates": (
                "the plugin's certificates rotated by cert-manager under writes: taken without a restart",
                self.certificates_rotated,
            ),
            "runtime": ("the node's containerd and kubelet restarted: Pods back, archiving resumes", self.runtime_restarted),
        }
        chosen = self.args.faults or list(faults)
        proof = (f"nothing lost through {', '.join(chosen)}: every row recovered to the latest point, every segment in the store once", self.proof)
        steps = [("a Cluster archiving to its own S3 store, a base backup", self.setup), *(faults[f] for f in chosen), proof]
        return self.run_steps(steps, fatal=(self.setup,))


FAULTS = ("sidecar", "store-down", "volume-full", "certificates", "runtime")


def main():
    global NS  # noqa: PLW0603 - set once, from the command line, before anything reads it
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--node-exec", required=True, help="the command prefix that runs a command on the node (docker exec <node>)")
    p.add_argument(
        "--plugin-alone-after",
        nargs="*",
        default=[],
        metavar="FILE",
        help="files whose existence says the other scenarios using the wal-archive plugin ended (before its certificates rotate)",
    )
    p.add_argument(
        "--node-alone-after",
        nargs="*",
        default=[],
        metavar="FILE",
        help="files whose existence says the scenarios beside this one ended (before the runtime is restarted)",
    )
    p.add_argument("--cnpg-manifest", required=True, help="CloudNativePG's config/default (tests/realkube/cnpg.sh manifest)")
    p.add_argument("--plugin-manifest", required=True, help="examples/wal-archive/manifests, image set")
    p.add_argument("--postgres-image", required=True, help="the instances' PostgreSQL image, present on the nodes")
    p.add_argument("--moto-image", required=True, help="an image with moto's server, present on the nodes")
    p.add_argument(
        "--faults",
        type=lambda text: [f for f in text.split(",") if f],
        default=[],
        help=f"the faults to try, comma-separated, in this order (default: all, {','.join(FAULTS)})",
    )
    p.add_argument(
        "--namespace",
        default=NS,
        help="the namespace of the Cluster and its store: two runs with other faults can go side by side",
    )
    args = p.parse_args()
    if not args.kubeconfig:
        sys.exit("scenario_faults.py: no kubeconfig (--kubeconfig or KUBECONFIG)")
    unknown = [f for f in args.faults if f not in FAULTS]
    if unknown:
        sys.exit(f"scenario_faults.py: --faults: unknown {unknown}; known: {', '.join(FAULTS)}")
    # Every helper of this module and of scenario_wal_archive reads the namespace from these.
    NS = wa.NS = args.namespace
    sys.exit(Faults(args).run())


if __name__ == "__main__":
    main()
