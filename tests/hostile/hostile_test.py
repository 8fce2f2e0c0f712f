"""Hostile clients against real kvtier processes on loopback (issue: hostile clients).

Each test starts its own `kvtier up` or `kvtier store` on free loopback ports, attacks it
the way an outsider can before authenticating (raw TCP from 127.0.0.2, so that the good
client on 127.0.0.1 is another address), and checks that a good client, the Python SDK
with the right token, is still served within a second. Descriptor limits come from
setrlimit in the child (what `prlimit --nofile` does). Every wait is bounded.

Run by ctest with PYTHONPATH at the built module and KVTIER_BIN at the kvtier binary.
"""
import json
import os
import re
import resource
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import kvtier

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing", "python"))
from kvtier_banner import read_banner  # noqa: E402

KVTIER_BIN = os.environ.get("KVTIER_BIN", "build/bin/kvtier")
ATTACKER = "127.0.0.2"  # the loopback range is 127/8: another source address, same host
GOOD_CLIENT_SECONDS = 1.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """A kvtier process on free loopback ports in a scratch data directory."""

    def __init__(self, role, *flags, nofile=None, data_dir=None, log_dir=None):
        self.scratch = None
        if data_dir is None:
            self.scratch = tempfile.TemporaryDirectory(prefix="kvtier-hostile-")
            data_dir = self.scratch.name
        self.data_dir = data_dir
        self.log_path = os.path.join(log_dir or data_dir, role + ".log")
        args = [KVTIER_BIN, role, "--data-dir", data_dir, "--metrics-port", "0", "--metrics-bind", "127.0.0.1"]
        args += ["--coordinator-listen", "127.0.0.1:0"] if role == "up" else []
        args += list(flags)

        def limit_descriptors():
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                        preexec_fn=limit_descriptors)
        self.banner, values = read_banner(self.process)
        if "rpc" not in values or "metrics" not in values:
            self.kill()
            raise RuntimeError("kvtier %s did not start: %s\n%s" % (role, self.banner, self.log_text()))
        self.address = values["rpc"]
        self.host, self.port = self.address.rsplit(":", 1)
        self.port = int(self.port)
        self.http = values["metrics"].removesuffix("/metrics")
        token_path = os.path.join(data_dir, "token")
        self.token = ""
        if os.path.exists(token_path):
            with open(token_path) as f:
                self.token = f.read().strip()

    def log_text(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def metric(self, name, labels=""):
        """The sum of the samples of `name` whose labels contain `labels`."""
        body = urllib.request.urlopen(self.http + "/metrics", timeout=5).read().decode()
        total = 0.0
        for line in body.splitlines():
            match = re.match(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), line)
            if match and labels in (match.group(1) or ""):
                total += float(match.group(2))
        return total

    def readiness(self):
        """/readyz's status and body ("ready", or why not)."""
        try:
            response = urllib.request.urlopen(self.http + "/readyz", timeout=5)
            return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def ready(self):
        return self.readiness()[0] == 200

    def rss_bytes(self):
        with open("/proc/%d/status" % self.process.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.close()
        return self.process.returncode

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.close()

    def close(self):
        self.log.close()
        if self.process.stdout:
            self.process.stdout.close()
        if self.scratch is not None:
            self.scratch.cleanup()
            self.scratch = None


def attacker_socket(port, host="127.0.0.1"):
    """A TCP connection to `port` from the attacker's address; None when refused."""
    s = socket.socket()
    s.bind((ATTACKER, 0))
    s.settimeout(2)
    try:
        s.connect((host, port))
    except OSError:
        s.close()
        return None
    return s


def closed_by_peer(s, wait_s):
    """Whether the peer closes `s` within `wait_s`; what it sends first (an RPC Abort) is read."""
    deadline = time.monotonic() + wait_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        s.settimeout(left)
        try:
            if s.recv(65536) == b"":
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


class HostileTestCase(unittest.TestCase):
    def start(self, role, *flags, **kwargs):
        node = Node(role, *flags, **kwargs)
        self.addCleanup(node.stop)
        return node

    def assert_good_client_served(self, node, why):
        """The Python SDK connects, authenticates and gets an answer within a second."""
        start = time.monotonic()
        client = kvtier.Client(node.address, token=node.token, timeout_s=GOOD_CLIENT_SECONDS)
        stats = client.worker_stats()
        elapsed = time.monotonic() - start
        self.assertGreater(stats["total_blocks"], 0)
        self.assertLess(elapsed, GOOD_CLIENT_SECONDS, why)
        return client


class RpcListenerTest(HostileTestCase):
    def test_listener_survives_descriptor_exhaustion(self):
        # Limits high enough that descriptors run out first: the EMFILE path itself.
        up = self.start("up", "--connections-max", "1000000", "--connections-max-unauthenticated", "1000000",
                        "--connections-max-unauthenticated-per-address", "1000000", nofile=256)
        held = [s for s in (attacker_socket(up.port) for _ in range(300)) if s is not None]
        self.addCleanup(lambda: [s.close() for s in held])
        self.assertGreater(len(held), 256, "more connections than the server has descriptors")
        why = ""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "cannot accept" not in why:
            why = up.readiness()[1]
            time.sleep(0.05)
        self.assertIn("the RPC listener cannot accept connections", why, "/readyz reports it")
        self.assertGreater(up.metric("kvtier_rpc_accept_errors_total"), 0)
        self.assertIn("accept failed", up.log_text())
        # While the descriptors are still taken, the oldest unauthenticated are shed for it.
        self.assert_good_client_served(up, "served while 300 idle connections hold the descriptors")
        self.assertGreater(up.metric("kvtier_rpc_connections_shed_total"), 0)
        for s in held:
            s.close()
        held.clear()
        self.assert_good_client_served(up, "served after the idle connections closed")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not up.ready():
            time.sleep(0.2)
        self.assertTrue(up.ready(), "ready again once accepts succeed")

    def test_default_limits_keep_descriptors_for_good_clients(self):
        up = self.start("up", nofile=256)
        held = [s for s in (attacker_socket(up.port) for _ in range(300)) if s is not None]
        self.addCleanup(lambda: [s.close() for s in held])
        self.assert_good_client_served(up, "one address cannot take every descriptor")
        self.assertGreater(up.metric("kvtier_rpc_connections_refused_total", 'reason="address"'), 0)
        self.assertEqual(up.metric("kvtier_rpc_accept_errors_total"), 0, "the limits held before the descriptors ran out")

    def test_unauthenticated_connections_close_at_the_deadline(self):
        up = self.start("up", "--connections-auth-deadline-ms", "1000")
        idle = [attacker_socket(up.port) for _ in range(40)]
        slow = [attacker_socket(up.port) for _ in range(5)]
        self.addCleanup(lambda: [s.close() for s in idle + slow if s is not None])
        self.assertNotIn(None, idle + slow)
        good = self.assert_good_client_served(up, "served beside the idle ones")
        # Slowloris: a frame header, then a byte now and then, never a whole message.
        start = time.monotonic()
        for s in slow:
            s.sendall(struct.pack("<II", 0, 1024))
        while time.monotonic() - start < 1.5:
            for s in slow:
                try:
                    s.send(b"\0")
                except OSError:
                    pass
            time.sleep(0.2)
        for s in idle + slow:
            self.assertTrue(closed_by_peer(s, 2.0), "closed at the authentication deadline")
        self.assertGreaterEqual(up.metric("kvtier_rpc_connection_errors_total", 'reason="auth_deadline"'), 45)
        self.assertEqual(up.metric("kvtier_rpc_unauthenticated_connections"), 0)
        # An authenticated connection outlives the deadline.
        self.assertGreater(good.worker_stats()["total_blocks"], 0)

    def test_memory_before_authentication_is_bounded(self):
        up = self.start("up")
        before = up.rss_bytes()
        peak = before
        frames = []
        for _ in range(30):
            s = attacker_socket(up.port)
            self.assertIsNotNone(s)
            frames.append(s)
            # One segment of 8 Mi words: a 64 MiB message, and 8 MiB of it sent.
            try:
                s.sendall(struct.pack("<II", 0, 8 << 20))
                s.sendall(b"\0" * (8 << 20))
            except OSError:
                pass  # closed at the header, as it should be
            peak = max(peak, up.rss_bytes())
        self.addCleanup(lambda: [s.close() for s in frames])
        for s in frames:
            self.assertTrue(closed_by_peer(s, 2.0), "a message over the pre-authentication limit closes it")
        peak = max(peak, up.rss_bytes())
        # The documented bound (docs/architecture.md): buffers of at most pre_auth_message_bytes
        # per connection; 30 connections of 64 KiB each, with room for the allocator.
        self.assertLess(peak - before, 32 << 20, "RSS %d -> %d" % (before, peak))
        self.assert_good_client_served(up, "served after the large frames")

    def test_token_guessing_is_throttled_per_address(self):
        up = self.start("up", "--connections-auth-failure-burst", "10", "--connections-auth-failures-per-minute", "60")
        codes = {}
        start = time.monotonic()
        tries = 0
        while time.monotonic() - start < 3 and tries < 300:
            tries += 1
            try:
                kvtier.Client(up.address, token="0" * 64, timeout_s=1.0)
                codes["OK"] = codes.get("OK", 0) + 1
            except kvtier.Error as e:
                codes[e.args[0]] = codes.get(e.args[0], 0) + 1
        elapsed = time.monotonic() - start
        self.assertNotIn("OK", codes)
        self.assertGreater(codes.get("RESOURCE_EXHAUSTED", 0), 0, codes)
        checked = up.metric("kvtier_rpc_auth_failures_total")
        # The burst, then one a second (every SDK attempt retries at most twice).
        self.assertLessEqual(checked, 10 + elapsed + 2, "tokens checked in %.1f s: %d (%s)" % (elapsed, checked, codes))
        self.assertGreater(up.metric("kvtier_rpc_auth_throttled_total"), 0)
        log = up.log_text()
        lines = [l for l in log.splitlines() if "authentication failed from 127.0.0.1" in l]
        self.assertGreaterEqual(len(lines), 1, "failures are logged")
        self.assertLessEqual(len(lines), 2, "and sampled: one line per 10 s per address")


class PoolMemoryTest(HostileTestCase):
    @staticmethod
    def pools():
        return {n for n in os.listdir("/dev/shm") if n.startswith("kvtier-pool-")}

    @staticmethod
    def pools_mapped_by(pid):
        """The pools in /dev/shm that process `pid` maps (other tests' nodes make theirs too)."""
        with open("/proc/%d/maps" % pid) as f:
            return {os.path.basename(line.split()[-1]) for line in f if "/dev/shm/kvtier-pool-" in line}

    def test_a_killed_up_leaves_no_pool_behind_after_a_restart(self):
        data = tempfile.TemporaryDirectory(prefix="kvtier-hostile-shm-")
        self.addCleanup(data.cleanup)
        first = Node("up", data_dir=data.name)
        created = self.pools_mapped_by(first.process.pid)
        self.assertEqual(len(created), 1, "kvtier up's host pool is in /dev/shm")
        self.assertTrue(created <= self.pools())
        first.kill()  # SIGKILL: nothing unlinks it
        self.assertTrue(created <= self.pools(), "a killed process leaves its pool")
        time.sleep(2.1)  # the sweep leaves pools younger than 2 s (created, not yet locked)
        second = Node("up", data_dir=data.name)
        self.addCleanup(second.stop)
        # Gone: swept by the restart, or by any process that made a pool since (each sweeps).
        self.assertFalse(created & self.pools(), "the dead process's pool was removed")
        self.assert_good_client_served(second, "the restarted node serves")


class DataStreamListenerTest(HostileTestCase):
    REPLY = struct.Struct("<IIIIQ")  # services/store/stream/protocol.h's StreamReply
    MAGIC = 0x3144564B

    def refusal(self, port):
        """A request with a bad magic from the good address: the stream answers and closes."""
        with socket.create_connection(("127.0.0.1", port), timeout=GOOD_CLIENT_SECONDS) as s:
            s.sendall(struct.pack("<IIQQ", 0xBAD, 1, 1, 1))
            reply = b""
            while len(reply) < self.REPLY.size:
                chunk = s.recv(self.REPLY.size - len(reply))
                if not chunk:
                    break
                reply += chunk
        self.assertEqual(len(reply), self.REPLY.size, "the data stream answered")
        magic, code, _, _, _ = self.REPLY.unpack(reply)
        self.assertEqual(magic, self.MAGIC)
        return code

    def start_store(self, *flags):
        data_port = free_port()
        store = self.start("store", "--auth-enabled", "false", "--store-listen", "127.0.0.1:0",
                           "--store-data-port", str(data_port), "--node-coordinator", "127.0.0.1:%d" % free_port(),
                           "--store-disk-bytes", "0", *flags, nofile=256)
        return store, data_port

    def test_data_stream_sheds_unproven_connections_for_a_good_client(self):
        store, data_port = self.start_store()
        held = [s for s in (attacker_socket(data_port) for _ in range(300)) if s is not None]
        self.addCleanup(lambda: [s.close() for s in held])
        start = time.monotonic()
        self.assertNotEqual(self.refusal(data_port), 0)
        self.assertLess(time.monotonic() - start, GOOD_CLIENT_SECONDS, "answered during the flood")
        # The first attacker was admitted, and as the oldest unproven connection it made room.
        self.assertTrue(closed_by_peer(held[0], 1.0), "the oldest unproven connection was shed")
        self.assertGreater(store.metric("kvtier_stream_connections_shed_total"), 0)
        self.assertGreater(store.metric("kvtier_stream_connections_refused_total"), 0, "one address is capped")
        self.assertEqual(store.metric("kvtier_stream_accept_errors_total"), 0, "descriptors never ran out")
        self.assertTrue(store.readiness()[1].find("cannot accept") < 0)

    def test_slowloris_is_closed_on_every_port(self):
        store, data_port = self.start_store("--connections-auth-deadline-ms", "1000")
        metrics_port = int(store.http.rsplit(":", 1)[1])
        # Each trickles the start of a valid request, a byte at a time, and never ends it.
        trickles = {"rpc": (store.port, struct.pack("<II", 0, 2)),
                    "data stream": (data_port, struct.pack("<II", self.MAGIC, 1) + b"\0" * 16),
                    "metrics": (metrics_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")}
        sockets = {name: attacker_socket(port) for name, (port, _) in trickles.items()}
        self.addCleanup(lambda: [s.close() for s in sockets.values() if s is not None])
        self.assertNotIn(None, sockets.values())
        closed_at = {}
        start = time.monotonic()
        sent = 0
        while len(closed_at) < len(sockets) and time.monotonic() - start < 15:
            for name, s in sockets.items():
                if name in closed_at:
                    continue
                data = trickles[name][1]
                try:
                    s.send(data[sent % len(data):sent % len(data) + 1])
                    if closed_by_peer(s, 0.05):
                        closed_at[name] = time.monotonic() - start
                except OSError:
                    closed_at[name] = time.monotonic() - start
            sent += 1
            time.sleep(0.25)
        self.assertLess(closed_at.get("rpc", 99), 3, "RPC: the authentication deadline (1 s)")
        self.assertLess(closed_at.get("data stream", 99), 3, "data stream: the first-request deadline (1 s)")
        self.assertLess(closed_at.get("metrics", 99), 12, "metrics: its 10 s client timeout")
        self.assertNotEqual(self.refusal(data_port), 0, "the data stream still answers")

    def test_data_stream_survives_descriptor_exhaustion(self):
        # Limits lifted, so that descriptors run out: the EMFILE path itself.
        store, data_port = self.start_store("--connections-data-stream-max", "1000000",
                                            "--connections-max-unauthenticated-per-address", "1000000")
        held = [s for s in (attacker_socket(data_port) for _ in range(300)) if s is not None]
        self.assertGreater(len(held), 200)
        time.sleep(0.5)  # the metrics endpoint has no descriptor either meanwhile
        for s in held:
            s.close()
        self.assertNotEqual(self.refusal(data_port), 0, "the listener accepts again")
        self.assertGreater(store.metric("kvtier_stream_accept_errors_total"), 0, "descriptors ran out")
        status, why = store.readiness()
        self.assertEqual(status, 503)
        self.assertIn("the data stream", why)
        self.assertIn("cannot accept connections", why)
        self.assertIn("accept failed", store.log_text())


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


def listening_ports(pid):
    """The TCP ports process `pid` listens on (its sockets in /proc/<pid>/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with open("/proc/%d/net/%s" % (pid, table)) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def speaks_plaintext(port, timeout_s=3.0):
    """Whether `port` answers plaintext: a kvtier RPC session without TLS gets any answer
    (even a refused token), or an HTTP request gets back anything but a TLS record."""
    try:
        kvtier.Client("127.0.0.1:%d" % port, token="0" * 64, timeout_s=timeout_s)
        return True
    except kvtier.Error as e:
        if e.args[0] not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            return True
    # An HTTP request, and a data stream request (protocol.h: magic "KVD1", a get of ticket 0),
    # which a plaintext stream answers with a refusal.
    for probe in (b"GET /metrics HTTP/1.0\r\n\r\n" + struct.pack("<II", 0, 2) + b"\0" * 16,
                  b"KVD1" + struct.pack("<IQQ", 1, 0, 0)):
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(probe)
            try:
                answer = s.recv(64)
            except (socket.timeout, ConnectionResetError):
                continue
        if len(answer) > 0 and answer[0] not in (0x15, 0x16):  # TLS alert or handshake records
            return True
    return False


if __name__ == "__main__":
    unittest.main()
