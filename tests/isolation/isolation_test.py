"""Tenant isolation against a real `kvtier up` with two tenants, an engine and a node
credential in one token file (docs/architecture.md, "Tenant isolation").

Tenant B runs the same script of calls on three fresh `kvtier up` clusters: one where tenant A never
ran, one where A first cached exactly B's prompts, and one where A first cached other
prompts of the same sizes. B's answers must not depend on what A cached: with A's same
prompts they equal the answers with A's other prompts field by field (block ids
included: A's blocks fill the pool alike), and the answers where A never ran in every
field but the pool's block ids. A tenant token never maps pool memory; an engine maps it
only acting for one of its tenants; a tenant token has no node rights. An engine that
serves both tenants over one connection (B's calls through a view, Client.for_tenant)
gives B the same answers as a connection of B's own. Across separate
processes (a coordinator, two workers writing through to a store, the store), B's lookup,
route, allocate, onboard from the store and commit are the same whether or not A first
cached the same prompt on the other worker and the store.

Run by ctest with PYTHONPATH at the built module and KVTIER_BIN at the kvtier binary.
"""
import array
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import kvtier

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing", "python"))
from kvtier_banner import read_banner  # noqa: E402
from kvtier_up import KvtierUp  # noqa: E402

KVTIER_BIN = os.environ.get("KVTIER_BIN", "build/bin/kvtier")
TOKEN_A, TOKEN_B = "a" * 40, "b" * 40
ENGINE, ENGINE_OF_A, NODE = "e" * 40, "f" * 40, "n" * 40
TOKEN_FILE = """
tenants:
  - {name: team-a, token: "%s"}
  - {name: team-b, token: "%s"}
engines:
  - {name: shared-engine, token: "%s", tenants: [team-a, team-b]}
  - {name: engine-of-a, token: "%s", tenants: [team-a]}
nodes:
  - {name: cluster-nodes, token: "%s"}
""" % (TOKEN_A, TOKEN_B, ENGINE, ENGINE_OF_A, NODE)
LAYOUT = dict(num_layers=4, num_kv_heads=2, head_dim=64, tokens_per_block=16, dtype="fp16")
OPAQUE = 1 << 63


def prompt(first, count):
    return array.array("I", range(first, first + count))


# The prompts of the script: (tokens, block_keys kwargs). The partial prompt is the plain
# one cut 10 tokens into its third block: two blocks reused, and 10 tokens of the third.
def prompts(base):
    plain = prompt(base, 48)
    partial = plain[:42]
    return {"plain": (plain, {}), "partial": (partial, {}),
            "lora": (prompt(base + 2000, 32), dict(lora_id=7, model_tag="llama3-8b/bf16", extra=["img:abc"]))}


def opaque_keys(base):
    return [(OPAQUE | 0x1234, base + i) for i in range(2)]


class IsolationUp(KvtierUp):
    """`kvtier up` with the token file, its embedded worker registered."""

    def __init__(self):
        super().__init__(KVTIER_BIN, TOKEN_FILE, "kvtier-isolation-")
        self.address = self.values["rpc"]
        # The embedded worker registers with the coordinator a moment after the banner.
        node = self.client(NODE)
        deadline = time.monotonic() + 10
        while code_of(lambda: node.route([])) == "UNAVAILABLE" and time.monotonic() < deadline:
            time.sleep(0.05)

    def client(self, token, act_for=""):
        return kvtier.Client(self.address, token=token, act_for=act_for)


def make_certificates(directory):
    """A CA and a certificate it signs for 127.0.0.1 (server.pem, server.key); returns the CA's file."""
    def run(*command):
        subprocess.run(command, cwd=directory, check=True, capture_output=True)
    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    run("openssl", "req", "-x509", *key, "-days", "2", "-subj", "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.pem")
    run("openssl", "req", *key, "-subj", "/CN=kvtier.test", "-keyout", "server.key", "-out", "server.csr")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:kvtier.test,IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "server.pem")
    return os.path.join(directory, "ca.pem")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ProcessCluster:
    """A coordinator, two workers writing through to a store, and the store: separate
    processes on loopback, with the token file; the nodes hold the node credential."""

    STORE = "store-0/store"

    def __init__(self, tls=False):
        self.dir = tempfile.TemporaryDirectory(prefix="kvtier-isolation-cluster-")
        root = self.dir.name
        self.ca = make_certificates(root) if tls else ""
        self.metrics = []  # each process's metrics URL
        tokens, node_token = os.path.join(root, "tokens.yaml"), os.path.join(root, "node-token")
        with open(tokens, "w") as f:
            f.write(TOKEN_FILE)
        with open(node_token, "w") as f:
            f.write(NODE + "\n")
        self.coordinator = "127.0.0.1:%d" % free_port()
        self.workers = ["127.0.0.1:%d" % free_port() for _ in range(2)]
        common = ["--auth-token-file", tokens, "--metrics-port", "0", "--metrics-bind", "127.0.0.1"]
        if tls:  # every listener (RPC, metrics, data streams) and every client
            common += ["--tls-cert-file", os.path.join(root, "server.pem"), "--tls-key-file",
                       os.path.join(root, "server.key"), "--tls-ca-file", self.ca]
        joined = ["--node-coordinator", self.coordinator, "--node-coordinator-token-file", node_token]
        commands = [["coordinator", "--data-dir", os.path.join(root, "c"), "--coordinator-listen", self.coordinator]]
        for i, address in enumerate(self.workers):
            commands.append(["worker", "--node-name", "worker-%d" % i, "--worker-listen", address, "--data-dir",
                             os.path.join(root, "w%d" % i), "--worker-pool-bytes", str(8 << 20),
                             "--store-host-cache-bytes", str(4 << 20), "--store-disk-bytes", "0",
                             "--worker-write-through-stores", self.STORE, "--worker-data-port", str(free_port()),
                             "--worker-fetch-stream-min-block-bytes", "0"] + joined)
        commands.append(["store", "--node-name", "store-0", "--store-listen", "127.0.0.1:%d" % free_port(),
                         "--data-dir", os.path.join(root, "s"), "--store-host-cache-bytes", str(4 << 20),
                         "--store-disk-bytes", "0", "--store-data-port", str(free_port())] + joined)
        self.processes = []
        try:
            for i, command in enumerate(commands):
                log = open(os.path.join(root, "%d.log" % i), "w")
                process = subprocess.Popen([KVTIER_BIN] + command + common,
                                           stdout=subprocess.PIPE, stderr=log, text=True)
                log.close()
                self.processes.append(process)
                banner, values = read_banner(process)
                if "rpc" not in values:
                    raise RuntimeError("%s did not start: %s" % (command[0], banner))
                self.metrics.append(values.get("metrics", ""))
            node = kvtier.Client(self.workers[0], token=NODE, coordinator_address=self.coordinator,
                                 tls_ca_file=self.ca)
            deadline = time.monotonic() + 10
            while code_of(lambda: node.route([], candidates=["worker-1/worker"])) == "UNAVAILABLE" and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
        except Exception:
            self.stop()
            raise

    def client(self, worker, token, act_for=""):
        return kvtier.Client(self.workers[worker], token=token, act_for=act_for, coordinator_address=self.coordinator,
                             tls_ca_file=self.ca)

    def metric(self, process, name):
        """The sum of the samples of `name` (a metric, with labels or a prefix of them) at
        process `process` (3: the store)."""
        context = ssl.create_default_context(cafile=self.ca) if self.ca else None
        with urllib.request.urlopen(self.metrics[process], timeout=10, context=context) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name)] in '{} ,')

    def stop(self):
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
            process.stdout.close()
        self.dir.cleanup()


def written_through(client, keys, store, timeout_s=10):
    """Whether the coordinator has heard of every block of `keys` at `store` (write-through)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = client.lookup(keys)
        if found["matched_blocks"] == len(keys) and \
                all(any(where[0] == store for where in block) for block in found["locations"]):
            return True
        time.sleep(0.05)
    return False


def code_of(call):
    try:
        call()
    except kvtier.Error as e:
        return e.args[0]
    return "OK"


def cache_as_a(up, base, engine=None):
    """Tenant A, through the engine of A (or `engine`): computes and commits every prompt of `base`."""
    engine = engine or up.client(ENGINE_OF_A, act_for="team-a")
    pool = kvtier.MappedPool(engine.attach_pool(0, kvtier.Layout(**LAYOUT)))
    sequence = 100
    for tokens, extra in prompts(base).values():
        keys = kvtier.block_keys(tokens, 16, **extra)
        table = engine.allocate(sequence, keys, len(tokens), tokens=tokens)
        for block in table.block_ids:
            pool.block(block)[:4] = b"AAAA"
        engine.commit(sequence, keys, tokens=tokens[:len(keys) * 16])
        sequence += 1
    table = engine.allocate(sequence, opaque_keys(base), 32)
    assert engine.commit(sequence, opaque_keys(base)) == 2
    return engine  # holds its sequences' blocks in use until it goes


def run_as_b(up, base, engine=None):
    """Every call of the script as tenant B (the engine's calls through `engine`, else a
    connection of the shared engine acting for B); the answers, by call."""
    engine = engine or up.client(ENGINE, act_for="team-b")
    own = up.client(TOKEN_B)
    seen = {"tenant": (engine.tenant, own.tenant)}
    sequence = 1
    for name, (tokens, extra) in prompts(base).items():
        keys = kvtier.block_keys(tokens, 16, **extra)
        tail = tokens[len(keys) * 16:]
        seen[name + ".lookup"] = own.lookup(keys, tail_tokens=tail)
        seen[name + ".route"] = own.route(keys, tail_tokens=tail)
        seen[name + ".local"] = engine.lookup(keys)
        table = engine.allocate(sequence, keys, len(tokens), tokens=tokens)
        seen[name + ".allocate"] = (table.block_ids, table.reused_blocks, table.partial_reuse_tokens)
        onboarded = engine.onboard(sequence, keys)
        seen[name + ".onboard"] = (onboarded.onboarded_blocks, onboarded.cached_blocks, onboarded.from_host,
                                   onboarded.from_disk, onboarded.from_remote)
        seen[name + ".commit"] = engine.commit(sequence, keys, tokens=tokens[:len(keys) * 16],
                                               ranges=[(0, 16, 90, None), (16, None, 40, 60.0)],
                                               decode_priority=10)
        engine.free(sequence)
        again = engine.allocate(sequence + 50, keys, len(tokens), tokens=tokens)
        seen[name + ".again"] = (again.block_ids, again.reused_blocks, again.partial_reuse_tokens)
        engine.free(sequence + 50)
        seen[name + ".lookup_after"] = lookup_until(own, keys, tail, len(keys))
        sequence += 1
    opaque = opaque_keys(base)
    table = engine.allocate(sequence, opaque, 32)
    seen["opaque.allocate"] = (table.block_ids, table.reused_blocks)
    seen["opaque.commit"] = engine.commit(sequence, opaque)
    seen["opaque.lookup"] = own.lookup(opaque)
    seen["stats.tenant"] = own.worker_stats()
    seen["stats.engine"] = engine.worker_stats()
    seen["attach_pool.tenant"] = code_of(lambda: own.attach_pool(0, kvtier.Layout(**LAYOUT)))
    return seen


def lookup_until(client, keys, tail, blocks, timeout_s=5):
    """The lookup once the coordinator has heard of `blocks` of them (events come each tick)."""
    deadline = time.monotonic() + timeout_s
    seen = client.lookup(keys, tail_tokens=tail)
    while seen["matched_blocks"] < blocks and time.monotonic() < deadline:
        time.sleep(0.02)
        seen = client.lookup(keys, tail_tokens=tail)
    return seen


def without_block_ids(seen):
    out = dict(seen)
    for name, value in seen.items():
        if name.endswith((".allocate", ".again")):
            out[name] = (len(value[0]),) + tuple(value[1:])
    return out


def cross_node_as_a(cluster, base):
    """Tenant A computes its plain prompt on worker 0 and waits for it to reach the store."""
    engine = cluster.client(0, ENGINE_OF_A, act_for="team-a")
    tokens = prompts(base)["plain"][0]
    keys = kvtier.block_keys(tokens, 16)
    engine.allocate(1, keys, len(tokens))
    engine.commit(1, keys)
    engine.free(1)
    assert written_through(engine, keys, ProcessCluster.STORE), "A's blocks never reached the store"


def cross_node_as_b(cluster, base):
    """Tenant B on worker 1: looks its prompt up, onboards what the lookup names, computes
    the rest; then its copy reaches the store and comes back on worker 0."""
    tokens = prompts(base)["plain"][0]
    keys = kvtier.block_keys(tokens, 16)
    seen = {}
    # The shared engine's connection acts for A; B's calls go through its view of B, on the
    # worker's connection and the coordinator's.
    b = cluster.client(1, ENGINE, act_for="team-a").for_tenant("team-b")
    found = b.lookup(keys)
    seen["lookup"] = found
    seen["route"] = b.route(keys)
    table = b.allocate(1, keys, len(tokens))
    seen["allocate"] = (table.block_ids, table.reused_blocks)
    onboarded = b.onboard(1, keys, sources=found["sources"] or [ProcessCluster.STORE])
    seen["onboard"] = (onboarded.onboarded_blocks, onboarded.cached_blocks, onboarded.from_host,
                       onboarded.from_disk, onboarded.from_remote)
    seen["commit"] = b.commit(1, keys)
    b.free(1)
    seen["written_through"] = written_through(b, keys, ProcessCluster.STORE)
    on_0 = cluster.client(0, ENGINE, act_for="team-b")
    table = on_0.allocate(2, keys, len(tokens))
    onboarded = on_0.onboard(2, keys, sources=[ProcessCluster.STORE])
    seen["worker_0.onboard"] = (table.reused_blocks, onboarded.onboarded_blocks, onboarded.from_remote)
    on_0.free(2)
    return seen


class TenantIsolationTest(unittest.TestCase):
    def script_on_fresh_cluster(self, a_base=None, one_connection=False):
        """`one_connection`: A and B are served by one connection of the shared engine,
        B's calls through its view of B."""
        up = IsolationUp()
        try:
            shared = up.client(ENGINE, act_for="team-a") if one_connection else None
            a = cache_as_a(up, a_base, engine=shared) if a_base is not None else None
            seen = run_as_b(up, 10000, engine=shared.for_tenant("team-b") if shared else None)
            del a
            return seen
        finally:
            up.stop()

    def test_tenant_b_sees_the_same_whatever_tenant_a_cached(self):
        alone = self.script_on_fresh_cluster()
        after_same = self.script_on_fresh_cluster(a_base=10000)
        after_other = self.script_on_fresh_cluster(a_base=50000)
        one_connection = self.script_on_fresh_cluster(a_base=10000, one_connection=True)
        # The answers themselves: B computes and then reuses its own prompts.
        self.assertEqual(alone["plain.commit"], 3, alone)
        self.assertEqual(alone["plain.again"][1], 3, alone)
        self.assertEqual(alone["partial.allocate"][1:], (2, 10), alone)
        self.assertEqual(alone["plain.lookup_after"]["matched_blocks"], 3, alone)
        self.assertEqual(alone["lora.lookup_after"]["matched_blocks"], 2, alone)
        self.assertEqual(alone["attach_pool.tenant"], "PERMISSION_DENIED")
        for name in after_same:
            self.assertEqual(after_same[name], after_other[name], "%s: A's same prompts vs A's other prompts" % name)
        alone_view, same_view = without_block_ids(alone), without_block_ids(after_same)
        for name in alone_view:
            self.assertEqual(same_view[name], alone_view[name], "%s: after A's same prompts vs A never ran" % name)
        for name in after_other:
            self.assertEqual(one_connection[name], after_other[name],
                             "%s: A's same prompts on B's engine connection vs A's other prompts" % name)

    def cross_node_on_fresh_cluster(self, a_base=None):
        cluster = ProcessCluster()
        try:
            if a_base is not None:
                cross_node_as_a(cluster, a_base)
            return cross_node_as_b(cluster, 10000)
        finally:
            cluster.stop()

    def test_across_nodes_and_the_store_tenant_b_sees_the_same_whatever_tenant_a_cached(self):
        alone = self.cross_node_on_fresh_cluster()
        after_same = self.cross_node_on_fresh_cluster(a_base=10000)
        self.assertEqual(alone["commit"], 3, alone)
        self.assertTrue(alone["written_through"], alone)
        self.assertEqual(alone["worker_0.onboard"], (0, 3, 3), "B's blocks come back from the store: %s" % alone)
        for name in alone:
            self.assertEqual(after_same[name], alone[name], "%s: after A's same prompt vs A never ran" % name)

    def test_a_tls_cluster_moves_blocks_on_encrypted_data_streams(self):
        """With TLS on every node, write-through and onboards from the store still go on the
        data streams (now TLS), and B's answers are those of the plaintext cluster."""
        cluster = ProcessCluster(tls=True)
        try:
            cross_node_as_a(cluster, 10000)
            seen = cross_node_as_b(cluster, 10000)
            received = cluster.metric(3, 'kvtier_stream_bytes_total{direction="received"')
            sent = cluster.metric(3, 'kvtier_stream_bytes_total{direction="sent"')
        finally:
            cluster.stop()
        self.assertEqual(seen["commit"], 3, seen)
        self.assertTrue(seen["written_through"], seen)
        self.assertEqual(seen["worker_0.onboard"], (0, 3, 3), "B's blocks come back from the store: %s" % seen)
        self.assertGreater(received, 0, "write-through reached the store on its data stream")
        self.assertGreater(sent, 0, "the onboards read the store's data stream")

    def test_only_engines_map_pools_and_only_for_their_tenants(self):
        up = IsolationUp()
        try:
            layout = kvtier.Layout(**LAYOUT)
            for token in (TOKEN_A, TOKEN_B):
                with self.assertRaises(kvtier.Error) as refused:
                    up.client(token).attach_pool(0, layout)
                self.assertEqual(refused.exception.args[0], "PERMISSION_DENIED")
                self.assertIn("engine credential", refused.exception.args[1])
            self.assertEqual(code_of(lambda: up.client(ENGINE_OF_A, act_for="team-b")), "PERMISSION_DENIED")
            self.assertEqual(code_of(lambda: up.client(TOKEN_A, act_for="team-b")), "PERMISSION_DENIED")
            self.assertEqual(code_of(lambda: up.client(ENGINE)), "INVALID_ARGUMENT")
            engine = up.client(ENGINE_OF_A, act_for="team-a")
            self.assertEqual(engine.tenant, "team-a")
            # A connection's views: only an engine's, only for its own tenants.
            self.assertEqual(code_of(lambda: engine.for_tenant("team-b")), "PERMISSION_DENIED")
            self.assertEqual(code_of(lambda: up.client(TOKEN_A).for_tenant("team-a")), "PERMISSION_DENIED")
            self.assertEqual(code_of(lambda: up.client(NODE).for_tenant("team-a")), "PERMISSION_DENIED")
            self.assertEqual(up.client(ENGINE, act_for="team-a").for_tenant("team-b").tenant, "team-b")
            kvtier.MappedPool(engine.attach_pool(0, layout))
            # A tenant token sees the pools' sizes only, never how full they are.
            stats = up.client(TOKEN_B).worker_stats()
            self.assertGreater(stats["total_blocks"], 0)
            self.assertEqual(stats["used_blocks"], 0)
            self.assertFalse(stats["cluster_counts"])
            self.assertTrue(up.client(NODE).worker_stats()["cluster_counts"])
        finally:
            up.stop()

    def test_a_token_revoked_by_a_token_file_reload_stops_its_sessions(self):
        up = IsolationUp()
        try:
            b, engine_for_b = up.client(TOKEN_B), up.client(ENGINE, act_for="team-b")
            a = up.client(ENGINE_OF_A, act_for="team-a")
            shared = up.client(ENGINE, act_for="team-a")
            view_of_b = shared.for_tenant("team-b")
            keys = kvtier.block_keys(prompt(30000, 32), 16)
            self.assertEqual(b.lookup(keys)["matched_blocks"], 0)
            with open(up.token_file, "w") as f:  # team-b goes; the shared engine acts for team-a only
                f.write(TOKEN_FILE.replace('  - {name: team-b, token: "%s"}\n' % TOKEN_B, "")
                        .replace("tenants: [team-a, team-b]", "tenants: [team-a]"))
            deadline = time.monotonic() + 10
            while code_of(lambda: b.lookup(keys)) == "OK" and time.monotonic() < deadline:
                time.sleep(0.05)
            with self.assertRaises(kvtier.Error) as revoked:
                b.lookup(keys)
            self.assertEqual(revoked.exception.args[0], "UNAUTHENTICATED")
            self.assertIn("revoked", revoked.exception.args[1])
            self.assertEqual(code_of(lambda: engine_for_b.allocate(1, keys, 32)), "UNAUTHENTICATED")
            # On one connection, the view of B ends and the engine's session of A goes on.
            self.assertEqual(code_of(lambda: view_of_b.allocate(1, keys, 32)), "UNAUTHENTICATED")
            self.assertEqual(code_of(lambda: shared.lookup(keys)), "OK")
            self.assertEqual(code_of(lambda: shared.for_tenant("team-b")), "PERMISSION_DENIED")
            self.assertEqual(code_of(lambda: up.client(TOKEN_B)), "UNAUTHENTICATED")
            self.assertEqual(code_of(lambda: up.client(ENGINE, act_for="team-b")), "PERMISSION_DENIED")
            self.assertEqual(a.lookup(keys)["matched_blocks"], 0, "team-a's session goes on")
            # A file that does not parse leaves the tokens in force.
            with open(up.token_file, "w") as f:
                f.write("tenants: [")
            time.sleep(2.5)
            self.assertEqual(code_of(lambda: a.lookup(keys)), "OK")
            self.assertIn("reload refused", up.log_text())
        finally:
            up.stop()

    def test_kvtier_status_shows_a_tenant_sizes_and_a_node_the_counts(self):
        up = IsolationUp()
        try:
            status = subprocess.run([KVTIER_BIN, "status", "--connect", up.address, "--token", TOKEN_B],
                                    capture_output=True, text=True, timeout=30)
            node = subprocess.run([KVTIER_BIN, "status", "--connect", up.address, "--token", NODE],
                                  capture_output=True, text=True, timeout=30)
            self.assertEqual(node.returncode, 0, node.stderr)
            self.assertEqual(status.returncode, 0, status.stderr)
            # A tenant is told which counts are not its to see; a node sees them.
            self.assertIn("node credentials only", status.stdout)
            self.assertIn("in use", node.stdout)
            self.assertNotIn("node credentials only", node.stdout)
        finally:
            up.stop()


if __name__ == "__main__":
    unittest.main()
