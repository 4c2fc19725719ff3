"""Loopback networking for the suites: a free TCP port, a plain HTTP GET."""

import socket
import urllib.error
import urllib.request


def free_port():
    """A free TCP port on 127.0.0.1 (the kernel picks it; the socket is
    closed again, so another process could take it in the meantime)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2):
    """(status, body) of a GET, error statuses included; OSError when
    nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
