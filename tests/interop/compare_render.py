#!/usr/bin/env python3
"""Compares what `cnpgi-operator render` printed for two plugins that should
behave alike (the Rust hello-world and the Go one written on cnpg-i-machinery):
the mutated Cluster spec, the plugin status, and each Pod's labels, annotations
and init container names. The operator's bookkeeping annotations are left
out: the drift hash is computed from each plugin's exact patch, and the inputs
fingerprint from each plugin's metadata (name, version, capabilities). Prints
the differences; exits 1 if any.

Usage: compare_render.py RUST.yaml GO.yaml
"""

import sys

import yaml

# The operator's own annotations, which differ by construction between plugins.
BOOKKEEPING = {"cnpgi.io/pluginsHash", "cnpgi.io/pluginsInputs"}


def summary(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    cluster = next(d for d in docs if d.get("kind") == "Cluster")
    pods = {}
    for pod in (d for d in docs if d.get("kind") == "Pod"):
        meta = pod["metadata"]
        pods[meta["name"]] = {
            "labels": meta.get("labels", {}),
            "annotations": {k: v for k, v in meta.get("annotations", {}).items() if k not in BOOKKEEPING},
            "initContainers": [c["name"] for c in pod["spec"].get("initContainers", [])],
        }
    plugins = {
        p["name"]: {k: yaml.safe_load(v) if k in ("labels", "annotations") else v for k, v in p.get("parameters", {}).items()}
        for p in cluster["spec"]["plugins"]
    }
    status = {s["name"]: s.get("status") for s in cluster.get("status", {}).get("pluginStatus", [])}
    return {"plugins": plugins, "status": status, "pods": pods}


def main():
    rust, go = summary(sys.argv[1]), summary(sys.argv[2])
    differences = [key for key in rust if rust[key] != go[key]]
    for key in differences:
        print(f"  {key}: Rust {rust[key]!r}\n  {' ' * len(key)}  Go   {go[key]!r}")
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
