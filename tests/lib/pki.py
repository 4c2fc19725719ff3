"""Certificates for the Python suites, made with openssl as tests/lib/pki.sh makes them.

Each function writes DIR/NAME.key and DIR/NAME.crt, returns their paths
(crt, key), raises PkiError naming what failed, and leaves no request or
extension file behind.

    ca(dir, name, subject, days=2)
        a self-signed CA (basicConstraints CA:TRUE, keyCertSign, cRLSign)
    leaf(dir, name, subject, san, usage, ca=None, days=2)
        a leaf (CA:FALSE, digitalSignature and keyEncipherment) for `usage`
        (serverAuth, clientAuth or both, comma-separated) with the
        subjectAltName `san` ("" for none, e.g. "DNS:plugin,IP:127.0.0.1"):
        self-signed, as cert-manager's selfSigned issuer makes them, or signed
        by DIR/CA.crt and DIR/CA.key when `ca` names them

Keys are EC P-256 (as cert-manager's default ECDSA).
"""

import os
import subprocess


class PkiError(RuntimeError):
    """openssl could not make a certificate."""


def _openssl(what, *args):
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PkiError(f"pki: openssl cannot make {what}: {result.stderr.strip()}")


def ca(directory, name, subject, days=2):
    crt, key = os.path.join(directory, name + ".crt"), os.path.join(directory, name + ".key")
    _openssl(
        f"the CA {name} ({subject})",
        "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", key, "-out", crt, "-days", str(days), "-subj", subject,
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return crt, key


def leaf(directory, name, subject, san, usage, ca=None, days=2):
    base = os.path.join(directory, name)
    crt, key, csr, ext = base + ".crt", base + ".key", base + ".csr", base + ".ext"
    with open(ext, "w", encoding="utf-8") as f:
        f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n")
        f.write(f"extendedKeyUsage={usage}\n" + (f"subjectAltName={san}\n" if san else ""))
    _openssl(
        f"the key and request of {name} ({subject})",
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", key, "-subj", subject, "-out", csr,
    )  # fmt: skip
    signer = ["-signkey", key]
    if ca:
        signer = ["-CA", os.path.join(directory, ca + ".crt"), "-CAkey", os.path.join(directory, ca + ".key"), "-CAcreateserial"]
    _openssl(
        f"the certificate {name}" + (f" signed with {ca}" if ca else ""),
        "x509", "-req", "-in", csr, *signer, "-days", str(days), "-sha256", "-extfile", ext, "-out", crt,
    )  # fmt: skip
    os.remove(csr)
    os.remove(ext)
    return crt, key
