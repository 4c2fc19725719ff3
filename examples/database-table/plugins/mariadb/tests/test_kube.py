"""Unit tests of kube.py: the Secret read as in a cluster (HTTPS, CA, bearer token) from a local fake API server.

  python3 -m unittest discover -s examples/database-table/plugins/mariadb/tests

Needs the openssl command (a self-signed certificate for 127.0.0.1).
"""

import base64
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import kube

TOKEN = "service-account-token"


def encoded(value):
    return base64.b64encode(value.encode()).decode()


class FakeApi(BaseHTTPRequestHandler):
    secrets = {  # noqa: RUF012 (read only)
        "/api/v1/namespaces/tables/secrets/app-db-app": {"data": {"username": encoded("app"), "password": encoded("pw"), "dbname": encoded("app")}},
        "/api/v1/namespaces/tables/secrets/partial-app": {"data": {"username": encoded("app")}},
    }

    def do_GET(self):
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            code, body = 401, {"kind": "Status"}
        elif self.path.startswith("/api/v1/namespaces/forbidden/"):
            code, body = 403, {"kind": "Status"}
        elif self.path in self.secrets:
            code, body = 200, self.secrets[self.path]
        else:
            code, body = 404, {"kind": "Status"}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class ReadSecret(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        d = cls.dir.name
        cls.cert, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cls.cert, "-days", "1", *subject],
            check=True,
            capture_output=True,
        )
        cls.token = os.path.join(d, "token")
        with open(cls.token, "w") as f:
            f.write(TOKEN + "\n")
        cls.server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cls.cert, key)
        cls.server.socket = context.wrap_socket(cls.server.socket, server_side=True)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        port = cls.server.server_address[1]
        # In a cluster: the API server from the Service environment variables.
        with mock.patch.dict(os.environ, {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(port)}):
            cls.config = kube.KubeConfig.from_flags(token_file=cls.token, ca_file=cls.cert)

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()
        cls.dir.cleanup()

    def test_the_secret_is_read_over_https_with_the_token(self):
        self.assertEqual(self.config.server, f"https://127.0.0.1:{self.server.server_address[1]}")
        credentials = kube.read_secret(self.config, "tables", "app-db-app")
        self.assertEqual((credentials.username, credentials.password, credentials.dbname), ("app", "pw", "app"))
        self.assertNotIn("pw", repr(credentials))

    def test_failures_say_what_to_do(self):
        cases = [
            (self.config, "tables", "missing-app", "HTTP 404 .*create it with the keys username, password and dbname"),
            (self.config, "forbidden", "app-db-app", "HTTP 403 .*needs get on secrets in this namespace"),
            (self.config, "tables", "partial-app", "has no UTF-8 'password' key"),
            (kube.KubeConfig(self.config.server, __file__, self.cert), "tables", "app-db-app", "HTTP 401 .*token was refused"),
            (kube.KubeConfig(self.config.server, self.token, None), "tables", "app-db-app", "CERTIFICATE_VERIFY_FAILED"),
            (kube.KubeConfig(None, self.token, None), "tables", "app-db-app", "not in a cluster .*give --kube-api-server"),
        ]
        for config, namespace, name, expected in cases:
            with self.subTest(expected=expected), self.assertRaisesRegex(kube.CredentialsError, expected):
                kube.read_secret(config, namespace, name, timeout=5)


if __name__ == "__main__":
    unittest.main()
