"""Chaos soak: a kvtier cluster of processes under load while its nodes are killed.

A coordinator, two workers and a store run as processes on loopback (the store's data
directory on a small tmpfs when root). Client threads (the Python SDK, as engines) run
requests against random workers: each allocates a prompt's blocks (shared system prompts
and unique turns), checks every block it reuses or onboards against the bytes derived
from its key, computes (writes) the rest, and commits. The workers write committed
blocks through to the store. Meanwhile a driver SIGKILLs and restarts a random node
(but those spared, one worker by default, whose RSS is compared from the warm-up to the
end), fills and frees the store's disk, and clients drop their connections now and then.

At the end the driver finds the blocks the coordinator places on the store's disk tier,
SIGKILLs the store once more, restarts it, and checks that every one of them is placed
there again and reads back right. The report: requests, kills survived, bytes verified,
wrong bytes served, acknowledged disk-tier blocks lost, engine-visible errors other than
clean refusals, and each process's RSS at start and end. Exit 1 when a goal is missed
(wrong bytes, lost blocks or unclean errors above 0).

Usage: chaos.py [--seconds N] [--clients N] [--kill-every S] [--disk-sync P] [--spare NODE...] [--json]
(PYTHONPATH at the built module, KVTIER_BIN at the kvtier binary).
"""
import argparse
import collections
import hashlib
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import kvtier

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing", "python"))
from kvtier_banner import read_banner  # noqa: E402

KVTIER_BIN = os.environ.get("KVTIER_BIN", "build/bin/kvtier")
LAYOUT = dict(num_layers=4, num_kv_heads=2, head_dim=64, tokens_per_block=16, dtype="fp16")
STORE_ID = "store-0/store"
# Refusals a client is told to expect and retry: the node or call went away, or was full.
CLEAN = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "NOT_FOUND", "CANCELLED"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def payload(key, size):
    """The bytes every holder of block `key` must serve: derived from the key alone."""
    digest = hashlib.sha256(struct.pack("<QQ", key[0] & (2**64 - 1), key[1] & (2**64 - 1))).digest()
    return digest * (size // len(digest))


def heap_bytes(metrics_url):
    """kvtier_process_heap_bytes by state, from a node's /metrics (common/process_memory.h)."""
    heap = {}
    try:
        body = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    except OSError:
        return heap
    for line in body.splitlines():
        if line.startswith("kvtier_process_heap_bytes{state="):
            state = line.split('"')[1]
            heap[state] = float(line.rsplit(" ", 1)[1])
    return heap


def rss_bytes(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Process:
    """One kvtier node: started, SIGKILLed and restarted with the same arguments."""

    def __init__(self, name, args, log_dir):
        self.name, self.args, self.log_dir = name, args, log_dir
        self.process = None
        self.starts = 0
        self.rss_start = 0

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.log_dir, "%s.%d.log" % (self.name, self.starts)), "w")
        self.process = subprocess.Popen([KVTIER_BIN] + self.args, stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        banner, values = read_banner(self.process)
        if "rpc" not in values:
            raise RuntimeError("%s did not start:\n%s" % (self.name, banner))
        self.metrics = values.get("metrics", "")
        threading.Thread(target=self.process.stdout.read, daemon=True).start()  # drain
        self.rss_start = 0

    def kill(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode if self.process else None


class Cluster:
    def __init__(self, root, disk_sync):
        self.root = root
        self.logs = os.path.join(root, "logs")
        os.makedirs(self.logs)
        tenant, engine, node = os.urandom(32).hex(), os.urandom(32).hex(), os.urandom(32).hex()
        self.token = engine  # the clients are an engine acting for tenant "chaos": they map pools
        tokens = os.path.join(root, "tokens.yaml")
        with open(tokens, "w") as f:
            f.write("tenants:\n  - {name: chaos, token: \"%s\"}\n" % tenant +
                    "engines:\n  - {name: engine, token: \"%s\", tenants: [chaos]}\n" % engine +
                    "nodes:\n  - {name: nodes, token: \"%s\"}\n" % node)
        node_token = os.path.join(root, "node-token")
        with open(node_token, "w") as f:
            f.write(node + "\n")
        # The store's disk, sized as storage/disk_tier.h says (1.25 x its 32 MiB, a 64 MiB
        # segment, the WAL): full only when the driver's ballast fills it.
        self.store_dir = os.path.join(root, "store")
        os.makedirs(self.store_dir)
        self.tmpfs = os.geteuid() == 0 and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=192m", "tmpfs", self.store_dir]).returncode == 0
        self.coordinator = "127.0.0.1:%d" % free_port()
        common = ["--auth-token-file", tokens, "--metrics-port", "0", "--metrics-bind", "127.0.0.1"]
        joined = ["--node-coordinator", self.coordinator, "--node-coordinator-token-file", node_token]
        self.workers = ["127.0.0.1:%d" % free_port() for _ in range(2)]
        self.nodes = {"coordinator": Process("coordinator", ["coordinator", "--data-dir", os.path.join(root, "c"),
                                                             "--coordinator-listen", self.coordinator] + common,
                                             self.logs)}
        for i, address in enumerate(self.workers):
            self.nodes["worker-%d" % i] = Process("worker-%d" % i, [
                "worker", "--node-name", "worker-%d" % i, "--worker-listen", address, "--data-dir",
                os.path.join(root, "w%d" % i), "--worker-pool-bytes", str(8 << 20), "--store-host-cache-bytes",
                str(4 << 20), "--store-disk-bytes", "0", "--worker-write-through-stores", STORE_ID,
                "--worker-data-port", str(free_port())] + joined + common, self.logs)
        self.nodes["store-0"] = Process("store-0", [
            "store", "--node-name", "store-0", "--store-listen", "127.0.0.1:%d" % free_port(), "--data-dir",
            self.store_dir, "--store-host-cache-bytes", str(2 << 20), "--store-disk-bytes", str(32 << 20),
            "--store-data-port", str(free_port()), "--store-disk-sync", disk_sync] + joined + common, self.logs)

    def start(self):
        for process in self.nodes.values():
            process.start()

    def stop(self):
        # Nodes first: they drain by leaving the coordinator.
        order = ["worker-0", "worker-1", "store-0", "coordinator"]
        codes = {name: self.nodes[name].stop() for name in order}
        if self.tmpfs:
            subprocess.run(["umount", "-l", self.store_dir])
        return codes


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = self.verified_bytes = self.wrong_blocks = self.drops = 0
        self.refusals, self.unclean = {}, {}
        # The latest committed prompts: what the store's disk tier (LRU) still holds.
        self.committed = collections.deque(maxlen=1000)

    def add(self, **counts):
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def error(self, table, what):
        with self.lock:
            table[what] = table.get(what, 0) + 1


class Engine(threading.Thread):
    """One client: requests against random workers, checking every byte it is served."""

    def __init__(self, index, cluster, stats, stop):
        super().__init__(daemon=True)
        self.index, self.cluster, self.stats, self.stop = index, cluster, stats, stop
        self.rng = random.Random(index)
        self.layout = kvtier.Layout(**LAYOUT)
        self.client = self.pool = None
        self.sequence = index << 40

    def connect(self):
        address = self.rng.choice(self.cluster.workers)
        self.client = kvtier.Client(address, token=self.cluster.token, act_for="chaos", timeout_s=2.0,
                                    coordinator_address=self.cluster.coordinator)
        self.pool = kvtier.MappedPool(self.client.attach_pool(0, self.layout))

    def check(self, block_id, key):
        served = bytes(self.pool.block(block_id))
        expected = payload(key, len(served))
        if served != expected:
            self.stats.add(wrong_blocks=1)
        else:
            self.stats.add(verified_bytes=len(served))

    def request(self):
        system = self.rng.randrange(16)  # 16 shared system prompts of 4 blocks, then a unique turn
        tokens = [system * 1000 + t for t in range(64)] + [self.rng.randrange(1 << 30) for _ in range(16 * self.rng.randint(1, 3))]
        keys = kvtier.block_keys(tokens, 16)
        self.sequence += 1
        sequence = self.sequence
        table = self.client.allocate(sequence, keys, len(tokens))
        for i in range(table.reused_blocks):
            self.check(table.block_ids[i], keys[i])
        done = table.reused_blocks
        if done < len(keys):
            found = self.client.lookup(keys)
            if found["matched_blocks"] > done and found["sources"]:
                got = self.client.onboard(sequence, keys, sources=found["sources"])
                for i in range(done, done + got.onboarded_blocks):
                    self.check(table.block_ids[i], keys[i])
                done += got.onboarded_blocks
        for i in range(done, len(keys)):
            block = self.pool.block(table.block_ids[i])
            block[:] = payload(keys[i], len(block))
        if self.rng.random() < 0.02:  # the engine dies mid-request: its connection drops
            self.client = self.pool = None
            self.stats.add(drops=1)
            return
        self.client.commit(sequence, keys, priority=50)
        self.client.free(sequence)
        with self.stats.lock:
            self.stats.requests += 1
            self.stats.committed.append(tuple(keys))

    def run(self):
        while not self.stop.is_set():
            try:
                if self.client is None:
                    self.connect()
                self.request()
            except kvtier.Error as e:
                code = e.args[0]
                self.stats.error(self.stats.refusals if code in CLEAN else self.stats.unclean, code)
                self.client = self.pool = None
                time.sleep(0.05)
            except Exception as e:  # noqa: BLE001: any other failure is what the soak looks for
                self.stats.error(self.stats.unclean, type(e).__name__ + ": " + str(e)[:120])
                self.client = self.pool = None
                time.sleep(0.05)


def fill_disk(directory, stop_at):
    """Writes a ballast file until the file system is full; its path."""
    path = os.path.join(directory, "ballast")
    chunk = b"\0" * (1 << 20)
    try:
        with open(path, "wb") as f:
            while time.monotonic() < stop_at:
                f.write(chunk)
                f.flush()
    except OSError:
        pass  # full (perhaps before the first byte: then the file may not exist)
    if os.environ.get("CHAOS_DEBUG"):
        subprocess.run("df -h %s; du -a %s | sort -n | tail -6" % (directory, directory), shell=True)
    return path


def on_store_disk(client, chains):
    """The blocks (chain, index) the coordinator places on the store's disk tier."""
    placed = set()
    for chain in chains:
        found = client.lookup(list(chain))
        for i in range(found["matched_blocks"]):
            if any(n == STORE_ID and t == "disk" for n, t, _ in found["locations"][i]):
                placed.add((chain, i))
    return placed


def final_check(cluster, stats, report):
    """Blocks on the store's disk survive one more SIGKILL and read back right."""
    client = kvtier.Client(cluster.workers[0], token=cluster.token, act_for="chaos",
                           coordinator_address=cluster.coordinator)
    with stats.lock:
        sample = list(dict.fromkeys(stats.committed))  # the latest, each once
    before = on_store_disk(client, sample)
    chains = sorted({chain for chain, _ in before})
    store = cluster.nodes["store-0"]
    store.kill()
    store.start()
    deadline = time.monotonic() + 30
    after = set()
    while time.monotonic() < deadline:
        after = on_store_disk(client, chains) & before
        if after == before:
            break
        time.sleep(0.5)
    report["disk_blocks_checked"] = len(before)
    report["disk_blocks_lost"] = len(before - after)
    # Read a few back through a worker, from the store alone.
    layout = kvtier.Layout(**LAYOUT)
    pool = kvtier.MappedPool(client.attach_pool(0, layout))
    wrong = verified = 0
    for n, (chain, index) in enumerate(sorted(after)[:40]):
        sequence = (1 << 50) + n
        keys = list(chain[:index + 1])
        table = client.allocate(sequence, keys, 16 * len(keys))
        got = client.onboard(sequence, keys, sources=[STORE_ID])
        for i in range(table.reused_blocks, table.reused_blocks + got.onboarded_blocks):
            served = bytes(pool.block(table.block_ids[i]))
            wrong += served != payload(keys[i], len(served))
            verified += 1
        client.free(sequence)
    report["disk_blocks_read_back"] = verified  # from the store and the worker's own tiers
    stats.add(wrong_blocks=wrong)


def soak(args):
    root = tempfile.mkdtemp(prefix="kvtier-chaos-")
    cluster = Cluster(root, args.disk_sync)
    stats = Stats()
    stop = threading.Event()
    report = {"seconds": args.seconds, "clients": args.clients, "store_disk_on_tmpfs": cluster.tmpfs,
              "disk_sync": args.disk_sync, "spared": args.spare}
    kills = {}
    try:
        cluster.start()
        engines = [Engine(i, cluster, stats, stop) for i in range(args.clients)]
        for engine in engines:
            engine.start()
        # Warm-up, no kills: the pools and tiers fill, so RSS then is the process's working size.
        time.sleep(max(2.0, args.seconds * 0.1))
        rss_start = {name: (p.starts, rss_bytes(p.process.pid)) for name, p in cluster.nodes.items()}
        heap_start = {name: heap_bytes(cluster.nodes[name].metrics) for name in args.spare}
        rng = random.Random(1)
        end = time.monotonic() + args.seconds
        fills = 0
        while time.monotonic() < end:
            time.sleep(min(args.kill_every, max(0, end - time.monotonic())))
            if time.monotonic() >= end:
                break
            victim = rng.choice([n for n in ("worker-0", "worker-1", "store-0", "coordinator") if n not in args.spare])
            cluster.nodes[victim].kill()
            time.sleep(rng.uniform(0.2, 1.0))
            cluster.nodes[victim].start()
            kills[victim] = kills.get(victim, 0) + 1
            if cluster.tmpfs and rng.random() < 0.5:
                ballast = fill_disk(cluster.store_dir, time.monotonic() + 5)
                time.sleep(rng.uniform(0.5, 2.0))
                if os.path.exists(ballast):
                    os.remove(ballast)
                fills += 1
        stop.set()
        for engine in engines:
            engine.join(timeout=30)
        time.sleep(1)  # the last write-throughs land
        rss_end = {name: (p.starts, rss_bytes(p.process.pid)) for name, p in cluster.nodes.items()}
        heap_end = {name: heap_bytes(cluster.nodes[name].metrics) for name in args.spare}
        final_check(cluster, stats, report)
        report.update({
            "requests": stats.requests, "kills": kills, "disk_fills": fills, "dropped_connections": stats.drops,
            "bytes_verified": stats.verified_bytes, "wrong_blocks_served": stats.wrong_blocks,
            "clean_refusals": stats.refusals, "unclean_errors": stats.unclean,
            # [after warm-up, at the end] of the processes never restarted since the warm-up
            "rss_mib": {n: [round(rss_start[n][1] / 2**20, 1), round(rss_end[n][1] / 2**20, 1)]
                        for n in rss_start if rss_start[n][0] == rss_end[n][0]},
            "restarted": {n: p.starts - 1 for n, p in cluster.nodes.items()},
            # the spared nodes' heap in use and kept free, [after warm-up, at the end]
            "heap_mib": {n: {state: [round(heap_start[n].get(state, 0) / 2**20, 1),
                                     round(heap_end[n].get(state, 0) / 2**20, 1)] for state in ("in_use", "free")}
                         for n in args.spare},
        })
    finally:
        stop.set()
        report["exit_codes"] = cluster.stop()
    report["goals_met"] = (report.get("wrong_blocks_served", 1) == 0 and report.get("disk_blocks_lost", 1) == 0
                           and not report.get("unclean_errors", {"not run": 1}) and report.get("requests", 0) > 0
                           and report.get("disk_blocks_checked", 0) > 0
                           and all(code == 0 for code in report["exit_codes"].values()))
    if report["goals_met"]:
        subprocess.run(["rm", "-rf", root])
    else:
        report["logs"] = cluster.logs
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=5.0, help="seconds between kills")
    parser.add_argument("--disk-sync", default="wal", help="the store's disk_sync: none, wal or fsync")
    parser.add_argument("--spare", nargs="*", default=["worker-1"],
                        help="nodes never killed, whose RSS is compared from the warm-up to the end")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = soak(args)
    print(json.dumps(report, indent=None if args.json else 2, sort_keys=True))
    return 0 if report["goals_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
