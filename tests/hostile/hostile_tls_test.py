"""Hostile conditions beside hostile clients, against real kvtier processes on loopback: a
disk that fills under the store, and TLS on every listener (no port answers plaintext,
both SDKs name the server they expect, the transfer bench measures TLS beside plaintext).
Every wait is bounded.

Run by ctest with PYTHONPATH at the built module and KVTIER_BIN at the kvtier binary.
"""

import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import unittest

import kvtier

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_node import (  # noqa: E402
    KVTIER_BIN,
    HostileTestCase,
    Node,
    closed_by_peer,
    free_port,
    listening_ports,
    speaks_plaintext,
)


class FullDiskTest(HostileTestCase):
    LAYOUT = dict(num_layers=4, num_kv_heads=2, head_dim=64, tokens_per_block=16, dtype="fp16")

    def test_a_full_disk_is_survived_and_the_shutdown_is_clean(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to mount a small tmpfs")
        scratch = tempfile.TemporaryDirectory(prefix="kvtier-hostile-disk-")
        self.addCleanup(scratch.cleanup)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", scratch.name], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", scratch.name])
        # A small pool and host tier, so that every new prompt pushes old blocks to the disk
        # tier, whose own capacity is far above what the file system holds.
        logs = tempfile.TemporaryDirectory(prefix="kvtier-hostile-log-")
        self.addCleanup(logs.cleanup)
        up = Node("up", "--worker-pool-bytes", str(4 << 20), "--store-host-cache-bytes", str(2 << 20),
                  "--store-disk-bytes", str(1 << 30), data_dir=scratch.name, log_dir=logs.name)
        try:
            client = kvtier.Client(up.address, token=up.token)
            layout = kvtier.Layout(**self.LAYOUT)
            client.attach_pool(0, layout)
            full_at = None
            for sequence in range(1, 5000):
                keys = kvtier.block_keys(list(range(sequence * 100, sequence * 100 + 48)), 16)
                client.allocate(sequence, keys, 48)
                client.commit(sequence, keys)
                client.free(sequence)
                if full_at is None and sequence % 50 == 0:
                    if up.metric("kvtier_store_io_errors_total", 'tier="disk"') > 0:
                        full_at = sequence
                # Writes go on past the first failure, until RocksDB's own files (its WAL, its
                # flushes, its log) have met the full disk too.
                if full_at is not None and sequence >= full_at + 1000:
                    break
            self.assertIsNotNone(full_at, "the file system filled before the disk tier's capacity")
            self.assert_good_client_served(up, "served with the disk full")
        finally:
            code = up.stop()
        with open(up.log_path) as f:
            log = f.read()
        if os.environ.get("HOSTILE_DEBUG"):
            print(log[-6000:])
        self.assertIn("disk full", log, "the full disk was logged")
        self.assertEqual(code, 0, "SIGTERM drains and exits 0 on a full disk: " + log[-2000:])
        self.assertNotIn("Assertion", log)


class TlsTest(HostileTestCase):
    def make_certificates(self, directory):
        """A CA, and a server certificate it signs for DNS kvtier.test and IP 127.0.0.1."""
        def run(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=kvtier test CA", "-keyout", "ca.key", "-out", "ca.pem")
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=kvtier.test",
            "-keyout", "server.key", "-out", "server.csr")
        with open(os.path.join(directory, "san.ext"), "w") as f:
            f.write("subjectAltName=DNS:kvtier.test,IP:127.0.0.1\n")
        run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "san.ext", "-out", "server.pem")
        return [os.path.join(directory, n) for n in ("ca.pem", "server.pem", "server.key")]

    def test_both_sdks_name_the_server_they_expect(self):
        certs = tempfile.TemporaryDirectory(prefix="kvtier-hostile-tls-")
        self.addCleanup(certs.cleanup)
        ca, cert, key = self.make_certificates(certs.name)
        up = self.start("up", "--tls-cert-file", cert, "--tls-key-file", key)
        self.assertIn("(TLS)", up.banner)
        # Python: the address is an IP, the name the certificate's DNS name.
        client = kvtier.Client(up.address, token=up.token, tls_ca_file=ca, tls_server_name="kvtier.test")
        self.assertGreater(client.worker_stats()["total_blocks"], 0)
        with self.assertRaises(kvtier.Error):
            kvtier.Client(up.address, token=up.token, tls_ca_file=ca, tls_server_name="someone-else.test",
                          timeout_s=2.0)
        # By the address alone: its IP is one the certificate names (subjectAltName IP).
        self.assertTrue(up.address.startswith("127.0.0.1:"), up.address)
        by_ip = kvtier.Client(up.address, token=up.token, tls_ca_file=ca)
        self.assertGreater(by_ip.worker_stats()["total_blocks"], 0)
        with self.assertRaisesRegex(kvtier.Error, "IP address mismatch"):
            kvtier.Client(up.address, token=up.token, tls_ca_file=ca, tls_server_name="127.0.0.2", timeout_s=2.0)
        # C++ (the kvtier CLI on the SDK's RPC client): the same, by flag.
        status = subprocess.run([KVTIER_BIN, "status", "--connect", up.address, "--token", up.token,
                                 "--tls-ca-file", ca, "--tls-server-name", "kvtier.test"],
                                capture_output=True, text=True, timeout=30)
        self.assertEqual(status.returncode, 0, status.stderr)
        wrong = subprocess.run([KVTIER_BIN, "status", "--connect", up.address, "--token", up.token,
                                "--tls-ca-file", ca, "--tls-server-name", "someone-else.test"],
                               capture_output=True, text=True, timeout=30)
        self.assertNotEqual(wrong.returncode, 0)
        status_by_ip = subprocess.run([KVTIER_BIN, "status", "--connect", up.address, "--token", up.token,
                                       "--tls-ca-file", ca], capture_output=True, text=True, timeout=30)
        self.assertEqual(status_by_ip.returncode, 0, status_by_ip.stderr)
        # Plain TCP to the TLS listener is not an RPC session: the handshake never completes.
        plain = socket.create_connection(("127.0.0.1", up.port), timeout=2)
        self.addCleanup(plain.close)
        plain.sendall(struct.pack("<II", 0, 2) + b"\0" * 16)
        self.assertTrue(closed_by_peer(plain, 3.0), "plaintext is refused")

    def test_the_transfer_bench_measures_tls_beside_plaintext(self):
        certs = tempfile.TemporaryDirectory(prefix="kvtier-hostile-tls-")
        self.addCleanup(certs.cleanup)
        ca, cert, key = self.make_certificates(certs.name)
        bench = subprocess.run([KVTIER_BIN, "bench", "transfer", "--json", "--total-bytes", str(4 << 20), "--clients",
                                "2", "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-file", ca,
                                "--tls-server-name", "kvtier.test"], capture_output=True, text=True, timeout=120)
        self.assertEqual(bench.returncode, 0, bench.stderr)
        figures = json.loads(bench.stdout)
        for path in ("inline", "stream", "tls_inline", "tls_stream"):
            self.assertGreater(figures[path + "_get_gbps"], 0, figures)
            self.assertGreater(figures[path + "_put_gbps"], 0, figures)
        wrong = subprocess.run([KVTIER_BIN, "bench", "transfer", "--total-bytes", str(4 << 20), "--tls-cert-file", cert,
                                "--tls-key-file", key, "--tls-ca-file", ca, "--tls-server-name", "someone-else.test"],
                               capture_output=True, text=True, timeout=120)
        self.assertNotEqual(wrong.returncode, 0, "a certificate for another name is refused")

    def test_with_tls_no_listener_speaks_plaintext(self):
        """Every TCP port a TLS node listens on refuses plaintext: its RPC, its metrics endpoint
        (HTTPS) and its data stream (TLS, with the node's certificate)."""
        certs = tempfile.TemporaryDirectory(prefix="kvtier-hostile-tls-")
        self.addCleanup(certs.cleanup)
        ca, cert, key = self.make_certificates(certs.name)
        tls = ("--tls-cert-file", cert, "--tls-key-file", key)
        up = self.start("up", *tls)
        data_port = free_port()
        store = self.start("store", "--auth-enabled", "false", "--store-listen", "127.0.0.1:0", "--store-data-port",
                           str(data_port), "--node-coordinator", "127.0.0.1:%d" % free_port(), "--store-disk-bytes",
                           "0", "--tls-ca-file", ca, *tls)
        verified = ssl.create_default_context(cafile=ca)
        for name, node in (("up", up), ("store", store)):
            ports = listening_ports(node.process.pid)
            self.assertTrue(node.http.startswith("https://"), node.http)
            metrics_port = int(node.http.rsplit(":", 1)[1])
            self.assertTrue({node.port, metrics_port} <= ports, "%s: %s" % (name, sorted(ports)))
            self.assertLessEqual(len(ports), 3, "%s listens on its RPC, metrics and data stream ports only: %s"
                                 % (name, sorted(ports)))
            if name == "store":
                self.assertIn(data_port, ports, "with TLS the store's data stream listens, encrypted")
            for port in ports:
                self.assertFalse(speaks_plaintext(port), "port %d of %s (%s) answers plaintext" % (port, name, sorted(ports)))
            with socket.create_connection(("127.0.0.1", metrics_port), timeout=5) as raw:
                with verified.wrap_socket(raw, server_hostname="kvtier.test") as https:
                    https.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                    self.assertTrue(https.recv(64).startswith(b"HTTP/1.1 200"), "%s serves its metrics over HTTPS" % name)


if __name__ == "__main__":
    unittest.main()
