#!/usr/bin/env python3
"""Plays, for tests/e2e/cloudnative-pg.sh, the parts of a Kubernetes cluster
that a control plane without nodes lacks, and nothing else:

* the job controller and kubelet for CloudNativePG's bootstrap Jobs (initdb):
  once such a Job exists, its status is set to one successful completion, as
  if its Pod had run;
* the kubelet for the instance Pods: each one gets a loopback address
  (127.A.B.N, A and B random per run so that two runs on one machine do not
  collide) as its Pod IP and is marked Running and Ready;
* the instance manager inside each instance Pod: an HTTPS server on
  <pod IP>:8000 answering GET /pg/status with a primary's status, under a
  certificate issued by the Cluster's own CA (the `<cluster>-ca` Secret that
  CloudNativePG created), which is what the operator verifies, reporting the
  operator's own binary hash and architecture (STANDIN_EXECUTABLE_HASH,
  STANDIN_ARCH) so that no instance manager upgrade is due; and, as the
  instance manager does after promotion, status.currentPrimary on the Cluster.

Everything is on loopback. Every action is logged on stdout.

Usage: standin.py WORKDIR NAMESPACE...    (environment as for kubecli.py)
"""

import base64
import contextlib
import http.server
import json
import os
import random
import signal
import ssl
import sys
import threading
import time
from datetime import UTC, datetime
from typing import ClassVar

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import pki
from kube import ApiError, Kube

STATUS_PORT = 8000
FIRST_IP = 20


def now():
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(msg):
    print(f"{now()} standin: {msg}", flush=True)


class StatusHandler(http.server.BaseHTTPRequestHandler):
    """The instance manager's status endpoint, as a healthy primary."""

    status: ClassVar[dict] = {}

    def do_GET(self):
        if self.path.split("?")[0] != "/pg/status":
            self.send_error(404, f"the stand-in only answers /pg/status, not {self.path}")
            return
        body = json.dumps(self.server.instance_status).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        pass


class StandIn:
    def __init__(self, workdir, namespaces):
        self.client = Kube.from_env()
        self.workdir = workdir
        self.namespaces = namespaces
        self.next_ip = FIRST_IP
        self.subnet = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
        self.ips = {}  # (namespace, pod) -> ip
        self.servers = {}  # ip -> HTTPServer
        self.done_jobs = set()

    def pod_ip(self, namespace, pod):
        key = (namespace, pod)
        if key not in self.ips:
            self.ips[key] = f"{self.subnet}.{self.next_ip}"
            self.next_ip += 1
        return self.ips[key]

    def cluster_ca(self, namespace, cluster):
        """Writes the Cluster's CA (made by CloudNativePG) to files."""
        secret = self.client.get(f"/api/v1/namespaces/{namespace}/secrets/{cluster}-ca")
        d = os.path.join(self.workdir, f"{namespace}-{cluster}")
        os.makedirs(d, exist_ok=True)
        for key, name in (("ca.crt", "ca.crt"), ("ca.key", "ca.key")):
            if key not in secret.get("data", {}):
                raise RuntimeError(f"Secret {namespace}/{cluster}-ca has no {key}")
            with open(os.path.join(d, name), "wb") as f:
                f.write(base64.b64decode(secret["data"][key]))
        return d

    def serve_status(self, namespace, cluster, pod, ip):
        if ip in self.servers:
            return
        d = self.cluster_ca(namespace, cluster)
        # A leaf issued by the Cluster's CA, as the instance manager's.
        crt, key = pki.leaf(d, pod, f"/CN={pod}", f"IP:{ip},DNS:{pod}", "serverAuth", ca="ca")
        server = http.server.ThreadingHTTPServer((ip, STATUS_PORT), StatusHandler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(crt, key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        server.instance_status = {
            "systemID": "7400000000000000001",
            "isPrimary": True,
            "currentLsn": "0/3000060",
            "receivedLsn": "",
            "replayLsn": "",
            "timeLineID": 1,
            "replayPaused": False,
            "pendingRestart": False,
            "pendingRestartForDecrease": False,
            "isWalReceiverActive": False,
            "isPgRewindRunning": False,
            "mightBeUnavailable": False,
            "isArchivingWAL": False,
            "node": "",
            "pod": None,
            "loadedConfigurationHash": "e2e-standin-configuration",
            "executableHash": os.environ.get("STANDIN_EXECUTABLE_HASH", "e2e-standin-executable"),
            "instanceManagerVersion": os.environ.get("CNPG_VERSION", "v1.30.0").lstrip("v"),
            "instanceArch": os.environ.get("STANDIN_ARCH", "amd64"),
            "isInstanceManagerUpgrading": False,
            "sessionID": f"standin-{pod}",
            "isPodReady": True,
        }
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers[ip] = server
        log(f"instance manager status for {namespace}/{pod} on https://{ip}:{STATUS_PORT}/pg/status")

    def complete_jobs(self, namespace):
        jobs = self.client.get(f"/apis/batch/v1/namespaces/{namespace}/jobs?labelSelector=cnpg.io/cluster")
        for job in jobs["items"]:
            name = job["metadata"]["name"]
            want = job["spec"].get("completions") or 1
            if job.get("status", {}).get("succeeded", 0) >= want:
                continue
            t = now()
            status = {
                "status": {
                    "startTime": job.get("status", {}).get("startTime") or t,
                    "completionTime": t,
                    "succeeded": want,
                    "active": 0,
                    "ready": 0,
                    "terminating": 0,
                    "conditions": [
                        {
                            "type": "SuccessCriteriaMet",
                            "status": "True",
                            "reason": "CompletionsReached",
                            "message": "Reached expected number of succeeded pods",
                            "lastProbeTime": t,
                            "lastTransitionTime": t,
                        },
                        {
                            "type": "Complete",
                            "status": "True",
                            "reason": "CompletionsReached",
                            "message": "Reached expected number of succeeded pods",
                            "lastProbeTime": t,
                            "lastTransitionTime": t,
                        },
                    ],
                }
            }
            self.client.request("PATCH", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status", status, "application/merge-patch+json")
            log(f"Job {namespace}/{name}: marked complete (succeeded={want})")

    def run_pods(self, namespace):
        pods = self.client.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=cnpg.io/podRole=instance")
        for pod in pods["items"]:
            meta = pod["metadata"]
            name = meta["name"]
            if meta.get("deletionTimestamp"):
                continue
            cluster = meta["labels"].get("cnpg.io/cluster")
            ip = self.pod_ip(namespace, name)
            self.serve_status(namespace, cluster, name, ip)
            status = pod.get("status", {})
            if status.get("phase") == "Running" and status.get("podIP") == ip:
                continue
            t = now()
            ready = [
                {"type": c, "status": "True", "lastProbeTime": None, "lastTransitionTime": t}
                for c in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ]
            containers = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": t}},
                }
                for c in pod["spec"]["containers"]
            ]
            patch = {
                "status": {
                    "phase": "Running",
                    "podIP": ip,
                    "podIPs": [{"ip": ip}],
                    "hostIP": "127.0.0.1",
                    "hostIPs": [{"ip": "127.0.0.1"}],
                    "startTime": t,
                    "conditions": ready,
                    "containerStatuses": containers,
                }
            }
            self.client.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", patch, "application/merge-patch+json")
            log(f"Pod {namespace}/{name}: Running and Ready at {ip}")

    def set_current_primary(self, namespace):
        clusters = self.client.get(f"/apis/postgresql.cnpg.io/v1/namespaces/{namespace}/clusters")
        for cluster in clusters["items"]:
            st = cluster.get("status", {})
            target = st.get("targetPrimary")
            if not target or st.get("currentPrimary") == target:
                continue
            if (namespace, target) not in self.ips:
                continue
            pod = self.client.maybe_get(f"/api/v1/namespaces/{namespace}/pods/{target}")
            if not pod or pod.get("status", {}).get("phase") != "Running":
                continue
            name = cluster["metadata"]["name"]
            self.client.request(
                "PATCH",
                f"/apis/postgresql.cnpg.io/v1/namespaces/{namespace}/clusters/{name}/status",
                {"status": {"currentPrimary": target, "currentPrimaryTimestamp": now()}},
                "application/merge-patch+json",
            )
            log(f"Cluster {namespace}/{name}: currentPrimary={target} (as the instance manager after promotion)")

    def loop(self):
        while True:
            for ns in self.namespaces:
                for step in (self.complete_jobs, self.run_pods, self.set_current_primary):
                    try:
                        step(ns)
                    except (ApiError, OSError, RuntimeError) as e:  # pki.PkiError is a RuntimeError
                        log(f"{step.__name__} in {ns}: {e}")
            time.sleep(0.3)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    log(f"watching namespaces {', '.join(sys.argv[2:])}")
    with contextlib.suppress(KeyboardInterrupt):
        StandIn(sys.argv[1], sys.argv[2:]).loop()


if __name__ == "__main__":
    main()
