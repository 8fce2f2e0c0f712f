"""What the hostile-client tests share: a kvtier process on free loopback ports (Node),
raw attacker sockets from another loopback address, and the test case that checks a good
client (the Python SDK) is still served within a second.
"""

import os
import re
import resource
import signal
import socket
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
        self.values = values
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
