#!/usr/bin/env python3
"""The scale benchmark's set-up and measures (benches/scale/run.sh drives it).

Subcommands (the API server from E2E_SERVER, E2E_CA, E2E_CERT, E2E_KEY):
  namespace NAME                       creates a namespace, waits for its default ServiceAccount
  node NAME                            a Node that kwok manages (annotation kwok.x-k8s.io/node=fake)
  crd FILE...                          applies CRDs (JSON or YAML) and waits until Established
  cnpgi-operator WORK PORT [no-webhooks]
                                       RBAC and webhooks of manifests/operator (webhooks at
                                       https://127.0.0.1:PORT; none registered with no-webhooks);
                                       prints the operator's kubeconfig
  cloudnative-pg WORK PORT CNPG_CACHE MODULE_DIR
                                       CloudNativePG's RBAC, its Cluster webhooks (from the
                                       release's config/webhook) at https://127.0.0.1:PORT, the
                                       serving certificate in WORK/webhook; prints its kubeconfig
  proc PID...                          {pid: {cpu_s, rss_mib, hwm_mib}} from /proc
  apiserver-requests                   {"VERB resource[/sub]": count} from the API server's /metrics
  summary NAMESPACE GROUP              where the Clusters and their Pods ended: counts of
                                       status.phase, and of the Pods' phase and readiness
  webhook-handlers URL                 {"seconds", "requests"}: the operator's own time in its webhook
                                       handlers so far (controller-runtime's
                                       controller_runtime_webhook_latency_seconds, at its /metrics URL)
  plugin-calls LOG FROM TO             the plugin's answered calls between two Unix times: count per
                                       method, calls/s, p50/p99 of the handler time (its log's elapsed_ms)
  table RESULTS.jsonl                  the BENCHMARKS.md tables
"""

import base64
import json
import os
import re
import sys
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import pki  # noqa: E402
from kube import Kube, load_yaml_documents, resource_path  # noqa: E402


def wait_for(what, fn, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.2)
    sys.exit(f"scale: {what}: not within {timeout} s")


def namespace(kube, name):
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    path = resource_path("v1", "ServiceAccount", name, "default")
    wait_for(f"the default ServiceAccount of namespace {name}", lambda: kube.maybe_get(path), 60)


def node(kube, name):
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": {"type": "kwok"}},
            "spec": {},
        }
    )


def load(path):
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            return [json.load(f)]
    return load_yaml_documents(path)


def crd(kube, files):
    for file in files:
        for obj in load(file):
            kube.apply(obj)
            path = resource_path("apiextensions.k8s.io/v1", "CustomResourceDefinition", name=obj["metadata"]["name"])

            def established(path=path):
                conditions = (kube.get(path).get("status") or {}).get("conditions") or []
                return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

            wait_for(f"the CRD {obj['metadata']['name']} is Established", established, 60)


def serving_certificate(work, crt_name, key_name):
    """A CA and a serving leaf for 127.0.0.1, the leaf put in WORK/webhook
    under the names the operator reads; returns the CA bundle."""
    directory = os.path.join(work, "webhook-pki")
    os.makedirs(directory, exist_ok=True)
    ca_crt, _ = pki.ca(directory, "ca", "/CN=scale-webhook-ca")
    crt, key = pki.leaf(directory, "tls", "/CN=scale-webhook", "IP:127.0.0.1", "serverAuth", ca="ca")
    certs = os.path.join(work, "webhook")
    os.makedirs(certs, exist_ok=True)
    os.replace(crt, os.path.join(certs, crt_name))
    os.replace(key, os.path.join(certs, key_name))
    with open(ca_crt, "rb") as f:
        return base64.b64encode(f.read()).decode()


def point_webhooks(obj, port, ca_bundle):
    """Makes the webhooks of a configuration call https://127.0.0.1:PORT."""
    obj["metadata"].pop("annotations", None)
    for hook in obj["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
    return obj


def cnpgi_operator(kube, work, port, webhooks="webhooks"):
    for file in ["namespace.yaml", "rbac.yaml"]:
        for obj in load_yaml_documents(os.path.join(ROOT, "manifests", "operator", file)):
            kube.apply(obj)
    ca_bundle = serving_certificate(work, "tls.crt", "tls.key")
    if webhooks != "no-webhooks":
        for obj in load_yaml_documents(os.path.join(ROOT, "manifests", "operator", "webhooks.yaml")):
            kube.apply(point_webhooks(obj, port, ca_bundle))
    print(kube.token_kubeconfig("cnpgi-system", "cnpgi-operator", os.path.join(work, "operator.kubeconfig")))


def cloudnative_pg(kube, work, port, cache, module):
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cnpg-system"}})
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "cnpg-manager", "namespace": "cnpg-system"}})
    for file in ["role.json", "role_binding.json"]:
        for obj in load(os.path.join(cache, "rbac", file)):
            kube.apply(obj)
    # The names CloudNativePG reads when WEBHOOK_CERT_DIR is set.
    ca_bundle = serving_certificate(work, "apiserver.crt", "apiserver.key")
    for obj in load_yaml_documents(os.path.join(module, "config", "webhook", "manifests.yaml")):
        # Only the Cluster webhooks: the benchmark creates nothing else.
        obj["webhooks"] = [h for h in obj["webhooks"] if "clusters" in h["rules"][0]["resources"]]
        kube.apply(point_webhooks(obj, port, ca_bundle))
    print(kube.token_kubeconfig("cnpg-system", "cnpg-manager", os.path.join(work, "operator.kubeconfig")))


def proc(pids):
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            # It exited (an operator that lost its Lease stops): say so.
            out[pid] = {"exited": True}
            continue
        status = {}
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                status[key] = value.strip()
        out[pid] = {
            # utime and stime: fields 14 and 15 of stat, 12 and 13 after the command.
            "cpu_s": (int(fields[11]) + int(fields[12])) / tick,
            "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
            "hwm_mib": int(status["VmHWM"].split()[0]) / 1024,
        }
    print(json.dumps(out))


REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")
WEBHOOK_DURATION = re.compile(r"^apiserver_admission_webhook_admission_duration_seconds_(sum|count)\{([^}]*)\} ([0-9.e+-]+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def apiserver_requests(kube):
    # Not JSON: Kube.request hands the text back as the answer's "message".
    text = kube.request("GET", "/metrics")["message"]
    counts = {}
    for line in text.splitlines():
        m = REQUEST_TOTAL.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(1)))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = f"{labels.get('verb', '?')} {resource}"
        counts[key] = counts.get(key, 0) + float(m.group(2))
    # The time the API server spent in each admission webhook (sum and count
    # of its histogram), as "webhook NAME seconds" and "webhook NAME calls".
    for line in text.splitlines():
        m = WEBHOOK_DURATION.match(line)
        if m:
            labels = dict(LABEL.findall(m.group(2)))
            what = "seconds" if m.group(1) == "sum" else "calls"
            key = f"webhook {labels.get('name', '?')} {what}"
            counts[key] = counts.get(key, 0) + float(m.group(3))
    print(json.dumps(counts, sort_keys=True))


def summary(kube, namespace, group):
    phases, pods = {}, {}
    for c in kube.get(f"/apis/{group}/v1/namespaces/{namespace}/clusters").get("items", []):
        phase = (c.get("status") or {}).get("phase") or "(none)"
        phases[phase] = phases.get(phase, 0) + 1
    for p in kube.get(f"/api/v1/namespaces/{namespace}/pods").get("items", []):
        status = p.get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        state = f"{status.get('phase', '?')}{', Ready' if ready else ''}"
        pods[state] = pods.get(state, 0) + 1
    print(json.dumps({"cluster_phases": phases, "pods": pods}, sort_keys=True))


HANDLER = re.compile(r"^controller_runtime_webhook_latency_seconds_(sum|count)(\{[^}]*\})? ([0-9.e+-]+)$")


def webhook_handlers(url):
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    total = {"seconds": 0.0, "requests": 0.0}
    for line in text.splitlines():
        m = HANDLER.match(line)
        if m:
            total["seconds" if m.group(1) == "sum" else "requests"] += float(m.group(3))
    print(json.dumps(total))


ANSI = re.compile(r"\x1b\[[0-9;]*m")
METHOD = re.compile(r"method=/[\w.]+/(\w+)\}")
ELAPSED = re.compile(r"elapsed_ms=([0-9.]+)")


def plugin_calls(log, since, until):
    per_method, elapsed = {}, []
    with open(log, encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = ANSI.sub("", raw)
            m, e = METHOD.search(line), ELAPSED.search(line)
            if not (m and e and "call succeeded" in line):
                continue
            try:
                stamp = datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
            if not since <= stamp < until:
                continue
            per_method[m.group(1)] = per_method.get(m.group(1), 0) + 1
            elapsed.append(float(e.group(1)))
    elapsed.sort()

    def pct(p):
        return elapsed[max(0, -(-len(elapsed) * p // 100) - 1)] if elapsed else None

    print(
        json.dumps(
            {
                "calls": len(elapsed),
                "per_second": len(elapsed) / (until - since) if until > since else None,
                "per_method": per_method,
                "p50_ms": pct(50),
                "p99_ms": pct(99),
            }
        )
    )


def fmt(value, digits=0, unit=""):
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}{unit}"


COLUMNS = [
    "N",
    "operator",
    "create p50 / p99",
    "floor p50 / p99",
    "in webhooks per create (handlers)",
    "last Pod patched",
    "operator RSS peak / after rest",
    "operator CPU during / rest",
    "machine CPU busy while creating",
    "plugin RSS peak",
    "plugin calls/s at rest (p99)",
    "API requests during: LIST pods / status writes / all",
    "API requests/s at rest",
]


def webhook_ms_per_create(r):
    """The API server's time in admission webhooks, per create (mean, ms)."""
    api = r["api_requests"]
    seconds = sum(v for k, v in api.items() if k.startswith("webhook ") and k.endswith(" seconds"))
    creates = r["driver"]["created"] or 1
    return seconds * 1000 / creates if seconds else None


def handler_ms_per_create(r):
    """The operator's own time in its webhook handlers, per create (mean, ms)."""
    handlers = r.get("webhook_handlers")
    if not handlers:
        return None
    return handlers["seconds"] * 1000 / (r["driver"]["created"] or 1)


def machine_busy_cell(r):
    """How busy the machine's cores were while the creates ran (older results lack it)."""
    busy = r["driver"].get("machine_busy_creating")
    return "n/a" if busy is None else f"{100 * busy:.0f} %"


def patched_cell(r):
    patched = r["driver"]["patched"]
    if not patched:
        return "(not asked)"
    if patched.get("outcome") == "all":
        return fmt(patched.get("last_s"), 1, " s")
    return f"{patched.get('count', 0)} of {r['clusters']} ({patched.get('outcome')})"


def table(path):
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for r in rows:
        if any(r[who][when].get("exited") for who in ("operator", "plugin") for when in ("during", "rest")):
            print(f"| {r['clusters']} | {r['subject']} | exited during the run: see its log |" + " |" * (len(COLUMNS) - 3))
            continue
        d, f, op, pl, api, calls = r["driver"], r["floor"], r["operator"], r["plugin"], r["api_requests"], r["rest_calls"]
        lists = api.get("LIST pods", 0)
        status = sum(v for k, v in api.items() if k.split()[0] in ("PATCH", "PUT", "APPLY") and k.endswith("clusters/status"))
        rest_api = r.get("api_requests_rest", {})
        rest_rate = sum(v for k, v in rest_api.items() if not k.startswith("webhook ")) / r["rest_seconds"]
        cells = [
            str(r["clusters"]),
            r["subject"],
            f"{fmt(d['create_ms']['p50'])} / {fmt(d['create_ms']['p99'])} ms",
            f"{fmt(f['create_ms']['p50'])} / {fmt(f['create_ms']['p99'])} ms",
            f"{fmt(webhook_ms_per_create(r), 1)} ms ({fmt(handler_ms_per_create(r), 1)} ms)",
            patched_cell(r),
            f"{fmt(op['during']['hwm_mib'])} / {fmt(op['rest']['rss_mib'])} MiB",
            f"{fmt(op['during']['cpu_s'] - op['start']['cpu_s'], 1)} / {fmt(op['rest']['cpu_s'] - op['during']['cpu_s'], 1)} s",
            machine_busy_cell(r),
            f"{fmt(pl['rest']['hwm_mib'])} MiB",
            f"{fmt(calls['per_second'], 1)} ({fmt(calls['p99_ms'], 2)} ms)",
            f"{lists:.0f} / {status:.0f} / {sum(v for k, v in api.items() if not k.startswith('webhook ')):.0f}",
            f"{rest_rate:.1f}",
        ]
        print("| " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    command, args = sys.argv[1], sys.argv[2:]
    if command == "proc":
        return proc(args)
    if command == "plugin-calls":
        return plugin_calls(args[0], float(args[1]), float(args[2]))
    if command == "table":
        return table(args[0])
    if command == "webhook-handlers":
        return webhook_handlers(args[0])
    kube = Kube.from_env()
    if command == "namespace":
        return namespace(kube, args[0])
    if command == "node":
        return node(kube, args[0])
    if command == "crd":
        return crd(kube, args)
    if command == "cnpgi-operator":
        return cnpgi_operator(kube, *args)
    if command == "cloudnative-pg":
        return cloudnative_pg(kube, *args)
    if command == "summary":
        return summary(kube, args[0], args[1])
    if command == "apiserver-requests":
        return apiserver_requests(kube)
    sys.exit(f"scale: unknown subcommand {command}\n{__doc__}")


if __name__ == "__main__":
    main()
