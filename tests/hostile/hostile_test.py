"""Hostile clients against real kvtier processes on loopback (issue: hostile clients).

Each test starts its own `kvtier up` or `kvtier store` on free loopback ports, attacks it
the way an outsider can before authenticating (raw TCP from 127.0.0.2, so that the good
client on 127.0.0.1 is another address), and checks that a good client, the Python SDK
with the right token, is still served within a second. Descriptor limits come from
setrlimit in the child (what `prlimit --nofile` does). Every wait is bounded.

Run by ctest with PYTHONPATH at the built module and KVTIER_BIN at the kvtier binary.
"""

import http.client
import json
import os
import socket
import struct
import sys
import tempfile
import time
import unittest
import urllib.parse

import kvtier

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_node import (  # noqa: E402
    GOOD_CLIENT_SECONDS,
    KVTIER_BIN,
    HostileTestCase,
    Node,
    attacker_socket,
    closed_by_peer,
    free_port,
)


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


class RoutingApiTest(HostileTestCase):
    @staticmethod
    def lookup(node, token, source):
        """POST /v1/lookup from `source` (a loopback address); the HTTP status."""
        url = urllib.parse.urlsplit(node.values["routing"].split()[0])
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=5, source_address=(source, 0))
        try:
            connection.request("POST", "/v1/lookup", body=json.dumps({"tokens": [1, 2, 3]}),
                               headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
            return connection.getresponse().status
        finally:
            connection.close()

    def test_token_guessing_over_http_is_throttled_per_address(self):
        """The routing API spends an address's budget of failed tokens as the RPC listeners
        do: a guesser gets 429 once it is spent, even for the right token (no oracle), while
        another address is served."""
        up = self.start("up", "--coordinator-http-listen", "127.0.0.1:0", "--connections-auth-failure-burst", "5",
                        "--connections-auth-failures-per-minute", "6")
        statuses = [self.lookup(up, "0" * 64, "127.0.0.2") for _ in range(20)]
        self.assertEqual(statuses[:5], [401] * 5, statuses)
        self.assertEqual(set(statuses[5:]), {429}, statuses)
        self.assertEqual(self.lookup(up, up.token, "127.0.0.2"), 429, "the right token from a spent address")
        self.assertEqual(self.lookup(up, up.token, "127.0.0.1"), 200, "another address keeps its budget")
        lines = [l for l in up.log_text().splitlines() if "routing API: authentication failed from 127.0.0.2" in l]
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


if __name__ == "__main__":
    unittest.main()
