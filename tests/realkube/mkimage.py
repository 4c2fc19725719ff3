#!/usr/bin/env python3
"""Writes a one-layer container image archive from a directory, without Docker or a registry.

    mkimage.py DIR NAME:TAG OUT.tar [--entrypoint ARG...] [--cmd ARG...] [--user UID:GID]
               [--env K=V]... [--workdir DIR]

The archive is an OCI image layout that also carries Docker's manifest.json, so
`ctr -n k8s.io images import OUT.tar` and `docker load -i OUT.tar` both take it.
Files keep their owners and modes; the layer is written to a temporary file, not
held in memory. Used by tests/realkube for the images no Dockerfile of this
project builds: the pause image, CoreDNS, cert-manager, PostgreSQL.
"""

import argparse
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("ref")
    p.add_argument("out")
    p.add_argument("--entrypoint", nargs="*")
    p.add_argument("--cmd", nargs="*")
    p.add_argument("--user")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--workdir")
    a = p.parse_args()
    if not os.path.isdir(a.dir):
        sys.exit(f"mkimage.py: {a.dir} is not a directory")
    if ":" not in a.ref.rsplit("/", 1)[-1]:
        sys.exit(f"mkimage.py: {a.ref} has no tag (NAME:TAG)")

    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(a.out))) as tmp:
        layer_path = os.path.join(tmp, "layer.tar")
        with tarfile.open(layer_path, "w", format=tarfile.PAX_FORMAT) as t:
            for root, dirs, files in os.walk(a.dir):
                dirs.sort()
                for name in sorted(dirs) + sorted(files):
                    full = os.path.join(root, name)
                    arc = os.path.relpath(full, a.dir)
                    # the contents of proc, sys and dev come from the runtime
                    if arc.split("/")[0] in ("proc", "sys", "dev") and "/" in arc:
                        continue
                    t.add(full, arcname=arc, recursive=False)
        layer_digest = sha256_file(layer_path)
        layer_size = os.path.getsize(layer_path)

        env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
        for item in a.env:
            if item.startswith("PATH="):
                env[0] = item
            else:
                env.append(item)
        cfg = {"Env": env}
        if a.entrypoint is not None:
            cfg["Entrypoint"] = a.entrypoint
        if a.cmd is not None:
            cfg["Cmd"] = a.cmd
        if a.user:
            cfg["User"] = a.user
        if a.workdir:
            cfg["WorkingDir"] = a.workdir
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": cfg,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
                "history": [{"created_by": f"tests/realkube/mkimage.py {a.ref}"}],
            }
        ).encode()
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_digest,
                    "size": len(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest,
                        "size": layer_size,
                    }
                ],
            }
        ).encode()
        manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        # containerd names an image without a registry docker.io/library/NAME
        first = a.ref.split("/")[0]
        full_ref = (
            a.ref
            if "/" in a.ref and ("." in first or ":" in first or first == "localhost")
            else ("docker.io/" + a.ref if "/" in a.ref else "docker.io/library/" + a.ref)
        )
        index = json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "annotations": {
                            "io.containerd.image.name": full_ref,
                            "org.opencontainers.image.ref.name": full_ref.rsplit(":", 1)[1],
                        },
                    }
                ],
            }
        ).encode()
        docker_manifest = json.dumps(
            [
                {
                    "Config": "blobs/sha256/" + config_digest[7:],
                    "RepoTags": [a.ref],
                    "Layers": ["blobs/sha256/" + layer_digest[7:]],
                }
            ]
        ).encode()
        partial = a.out + ".partial"
        with tarfile.open(partial, "w") as out:

            def put(name, data):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = int(time.time())
                info.mode = 0o644
                out.addfile(info, io.BytesIO(data))

            put("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
            put("index.json", index)
            put("manifest.json", docker_manifest)
            out.add(layer_path, arcname="blobs/sha256/" + layer_digest[7:])
            put("blobs/sha256/" + config_digest[7:], config)
            put("blobs/sha256/" + manifest_digest[7:], manifest)
        shutil.move(partial, a.out)
    print(full_ref, manifest_digest)


if __name__ == "__main__":
    main()
