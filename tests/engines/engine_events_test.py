#!/usr/bin/env python3
"""Engines' KV event streams into a real `kvtier up`, checked through the routing API.

Publishers speak the engines' exact wire format with pyzmq and msgpack (Debian's
python3-zmq, python3-msgpack): a PUB socket sending [topic, seq (8 bytes big-endian),
msgpack payload] and a ROUTER replay socket answering ["", start_seq] with [seq, payload]
(vLLM, SGLang) or [topic, seq, payload] (TensorRT-LLM) frames, then an end marker. Payloads
follow the engines' own structs: vLLM's maps (vllm/distributed/kv_events.py @ 0181ea31),
SGLang's positional arrays (python/sglang/srt/disaggregation/kv_events.py @ 612d5790),
TensorRT-LLM's array envelope of tagged maps (kv_cache_events.py @ 13599e98).

Covered: stored, removed, cleared, tier moves, a gap filled by replay, a publisher restart,
a replay that cannot reach back, two dp ranks, cache salts and LoRA names, tenants
isolated, a malformed payload in the middle, SGLang's one-token pages joined into blocks.

Run by ctest with KVTIER_BIN at the kvtier binary.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

import msgpack
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing", "python"))
from kvtier_up import KvtierUp  # noqa: E402

KVTIER_BIN = os.environ.get("KVTIER_BIN", "build/bin/kvtier")
TOKEN_A, TOKEN_B = "a" * 40, "b" * 40
TOKEN_FILE = """
tenants:
  - {name: team-a, token: "%s"}
  - {name: team-b, token: "%s"}
""" % (TOKEN_A, TOKEN_B)
END_SEQ = (2 ** 64 - 1).to_bytes(8, "big")


class Publisher:
    """An engine's ZMQ publisher with a replay buffer, serving replays on its own thread."""

    def __init__(self, topic_in_replay=False):
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.events_port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.router = self.ctx.socket(zmq.ROUTER)
        self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.topic_in_replay = topic_in_replay
        self.seq = 0
        self.buffer = []
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self.serve_replays, daemon=True)
        self.thread.start()

    def serve_replays(self):
        while self.running:
            if not self.router.poll(50):
                continue
            ident, _, start = self.router.recv_multipart()
            start = int.from_bytes(start, "big")
            with self.lock:
                held = [(s, p) for s, p in self.buffer if s >= start]
            for s, p in held:
                frames = [ident, b""] + ([b""] if self.topic_in_replay else []) + [s.to_bytes(8, "big"), p]
                self.router.send_multipart(frames)
            self.router.send_multipart([ident, b""] + ([b""] if self.topic_in_replay else []) + [END_SEQ, b""])

    def send_payload(self, payload, live=True):
        """Publishes one payload (bytes) under the next number; live=False keeps it for replay only."""
        with self.lock:
            seq = self.seq
            self.seq += 1
            self.buffer.append((seq, payload))
        if live:
            self.pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        return seq

    def send(self, batch, live=True):
        return self.send_payload(msgpack.packb(batch, use_bin_type=True), live)

    def forget_before(self, seq):
        with self.lock:
            self.buffer = [(s, p) for s, p in self.buffer if s >= seq]

    def restart(self):
        with self.lock:
            self.seq = 0
            self.buffer = []

    def close(self):
        self.running = False
        self.thread.join()
        self.pub.close(0)
        self.router.close(0)
        self.ctx.term()


def tokens(first, count):
    return list(range(first, first + count))


def vllm_stored(hashes, parent, toks, block_size=16, medium="GPU", lora_name=None, extra_keys=None):
    event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": toks,
             "block_size": block_size, "lora_id": None, "medium": medium, "lora_name": lora_name}
    if extra_keys is not None:
        event["extra_keys"] = extra_keys
    return event


def vllm_batch(events, dp_rank=None):
    batch = {"ts": time.time(), "events": events}
    if dp_rank is not None:
        batch["data_parallel_rank"] = dp_rank
    return batch


class KvtierUpWithEngines(KvtierUp):
    """`kvtier up` following `engines` (flag items), or the engines of a config file."""

    def __init__(self, engines=None, config_text=None, extra=()):
        def args(directory):
            self.config = os.path.join(directory, "kvtier.yaml")
            if config_text is not None:
                self.write_config(config_text)
            source = ["--coordinator-engines", ",".join(engines)] if engines is not None else ["--config", self.config]
            return ["--coordinator-http-listen", "127.0.0.1:0"] + source + list(extra)

        super().__init__(KVTIER_BIN, TOKEN_FILE, "kvtier-engines-", args, ready_label="routing")
        self.http = self.values["routing"].split()[0].rsplit("/v1/", 1)[0]
        self.metrics = self.values["metrics"]

    def write_config(self, text):
        with open(self.config + ".new", "w") as f:
            f.write(text)
        os.replace(self.config + ".new", self.config)

    def post(self, path, body, token=TOKEN_A):
        request = urllib.request.Request(self.http + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Authorization": "Bearer " + token})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def lookup(self, toks, token=TOKEN_A, **extra):
        status, answer = self.post("/v1/lookup", dict(tokens=toks, **extra), token)
        assert status == 200, answer
        return {i["name"]: i for i in answer["instances"]}

    def metric(self, name):
        with urllib.request.urlopen(self.metrics, timeout=5) as response:
            text = response.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def until(check, timeout_s=10, keepalive=None):
    """Waits for check() to be truthy; `keepalive` publishes now and then (a subscriber that
    joined late learns of a gap only from a later message)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        if keepalive:
            keepalive()
        time.sleep(0.1)
    raise AssertionError("timed out; last: %r" % (last,))


class EngineEventsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.vllm = Publisher()
        cls.sglang = Publisher()
        cls.trtllm = Publisher(topic_in_replay=True)
        engines = [
            "name=vllm-a;events=tcp://127.0.0.1:%d;replay=tcp://127.0.0.1:%d;format=vllm;tokens_per_block=16;"
            "tenant=team-a;model=llama" % (cls.vllm.events_port, cls.vllm.replay_port),
            "name=sglang-a;events=tcp://127.0.0.1:%d;replay=tcp://127.0.0.1:%d;format=sglang;tokens_per_block=16;"
            "tenant=team-a;model=llama" % (cls.sglang.events_port, cls.sglang.replay_port),
            "name=trt-b;events=tcp://127.0.0.1:%d;replay=tcp://127.0.0.1:%d;format=trtllm;tokens_per_block=16;"
            "tenant=team-b;model=llama" % (cls.trtllm.events_port, cls.trtllm.replay_port),
        ]
        # Routes here compare answers call by call: the coordinator's count of what it routed
        # (each /v1/route a load on its choice) is off; EngineRoutedLoadTest has it on.
        cls.up = KvtierUpWithEngines(engines, extra=["--coordinator-routed-load-half-life-ms", "0"])

    @classmethod
    def tearDownClass(cls):
        cls.up.stop()
        for p in (cls.vllm, cls.sglang, cls.trtllm):
            p.close()

    def prefix(self, name, toks, token=TOKEN_A, **extra):
        found = self.up.lookup(toks, token, model="llama", **extra).get(name)
        return found["prefix_tokens_by_tier"] if found else None

    def route(self, tokens_file, *flags):
        """`kvtier route` against the routing API as tenant A: its JSON answer."""
        done = subprocess.run([KVTIER_BIN, "route", "--http", self.up.http, "--token", TOKEN_A,
                               "--tokens-file", tokens_file, *flags], capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.count("\n"), 1, done.stdout)
        return json.loads(done.stdout)

    def heartbeat(self, publisher):
        """An empty batch: what an engine sends when a step changed nothing."""
        return lambda: publisher.send(vllm_batch([]))

    def test_1_vllm_map_form_stores_moves_removes_and_fills_gaps(self):
        p = self.vllm
        prompt = tokens(1000, 64)
        # The first message goes out before the subscription is up: the next one shows the
        # gap and the replay brings it.
        p.send(vllm_batch([vllm_stored([b"h1" * 16, b"h2" * 16], None, prompt[:32])]))
        until(lambda: self.prefix("vllm-a", prompt) == {"gpu": 32, "host": 32, "disk": 32},
              keepalive=self.heartbeat(p))
        # A child naming its parent by the engine's hash; then a tier move of the last block.
        p.send(vllm_batch([vllm_stored([b"h3" * 16, b"h4" * 16], b"h2" * 16, prompt[32:])]))
        until(lambda: self.prefix("vllm-a", prompt) == {"gpu": 64, "host": 64, "disk": 64})
        p.send(vllm_batch([vllm_stored([b"h4" * 16], b"h3" * 16, prompt[48:], medium="CPU"),
                           {"type": "BlockRemoved", "block_hashes": [b"h4" * 16], "medium": "GPU"}]))
        until(lambda: self.prefix("vllm-a", prompt) == {"gpu": 48, "host": 64, "disk": 64})
        # A gap: message n is only in the replay buffer; n + 1 arrives live.
        replays = self.up.metric('kvtier_engine_replays_total{engine="vllm-a"}')
        p.send(vllm_batch([{"type": "BlockRemoved", "block_hashes": [b"h4" * 16], "medium": "CPU"}]), live=False)
        p.send(vllm_batch([{"type": "BlockRemoved", "block_hashes": [b"h3" * 16], "medium": "GPU"}]))
        until(lambda: self.prefix("vllm-a", prompt) == {"gpu": 32, "host": 32, "disk": 32})
        self.assertEqual(self.up.metric('kvtier_engine_replays_total{engine="vllm-a"}') - replays, 1)

    def test_2_a_malformed_payload_is_counted_and_the_stream_goes_on(self):
        p = self.vllm
        before = self.up.metric('kvtier_engine_decode_errors_total{engine="vllm-a"}')
        p.send_payload(b"\xc1 not msgpack")
        p.send(vllm_batch([{"type": "BlockStored", "block_hashes": [5], "parent_block_hash": None}]))  # no tokens
        prompt = tokens(5000, 16)
        p.send(vllm_batch([vllm_stored([77], None, prompt)]))
        until(lambda: self.prefix("vllm-a", prompt) == {"gpu": 16, "host": 16, "disk": 16})
        self.assertEqual(self.up.metric('kvtier_engine_decode_errors_total{engine="vllm-a"}') - before, 2)
        self.assertIsNone(self.up.process.poll())

    def test_2b_a_body_that_is_not_a_prompt_query_gets_a_400_naming_what_is_wrong(self):
        for body, named in ((b'{"tokens": [1, 2.5]}', "tokens[1]"), (b'{"tokens": [1]', "',' or '}'"),
                            (b'{"model": 7}', "model"), (b'[1, 2]', "a JSON object at byte 0"),
                            (b'{"tokens": [4294967296]}', "[0, 4294967295]")):
            request = urllib.request.Request(self.up.http + "/v1/lookup", data=body, method="POST",
                                             headers={"Authorization": "Bearer " + TOKEN_A})
            with self.assertRaises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=5)
            self.assertEqual(refused.exception.code, 400, body)
            answer = json.loads(refused.exception.read())
            self.assertIn(named, answer["error"], body)
            self.assertEqual(answer["code"], "INVALID_ARGUMENT")
        # Keys a gateway adds beside the API's are skipped; the prompt is looked up.
        status, answer = self.up.post("/v1/lookup", {"tokens": tokens(1, 16), "stream": True, "x": {"y": [1]}})
        self.assertEqual(status, 200, answer)

    def test_3_cache_salts_lora_names_and_tenants_isolate(self):
        p = self.vllm
        prompt = tokens(7000, 32)
        # vLLM puts the LoRA name in every block's extra keys and the cache salt in the first's.
        p.send(vllm_batch([vllm_stored([901, 902], None, prompt, lora_name="sql",
                                       extra_keys=[["sql", "salt-1"], ["sql"]])]))
        until(lambda: self.prefix("vllm-a", prompt, cache_salt="salt-1", lora_name="sql"))
        self.assertEqual(self.prefix("vllm-a", prompt, cache_salt="salt-1", lora_name="sql")["gpu"], 32)
        self.assertIsNone(self.prefix("vllm-a", prompt), "no salt, no LoRA: another key space")
        self.assertIsNone(self.prefix("vllm-a", prompt, cache_salt="salt-2", lora_name="sql"))
        self.assertIsNone(self.prefix("vllm-a", prompt, cache_salt="salt-1"))
        self.assertIsNone(self.prefix("vllm-a", prompt, TOKEN_B, cache_salt="salt-1", lora_name="sql"),
                          "team-b never sees team-a's engine")
        # `kvtier route` sends the salt and the LoRA name as the API names them.
        tokens_file = os.path.join(self.up.dir.name, "salted.json")
        with open(tokens_file, "w") as f:
            json.dump(prompt, f)
        salted = self.route(tokens_file, "--lookup", "--model", "llama", "--cache-salt", "salt-1",
                            "--lora-name", "sql")
        self.assertIn("vllm-a", [i["name"] for i in salted["instances"]], salted)
        unsalted = self.route(tokens_file, "--lookup", "--model", "llama", "--lora-name", "sql")
        self.assertNotIn("vllm-a", [i["name"] for i in unsalted["instances"]], unsalted)
        # TensorRT-LLM's array envelope of tagged maps, for team-b, replayed with a topic frame.
        t = self.trtllm
        t.send([time.time(), [{"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None,
                               "token_ids": prompt, "block_size": 16, "lora_id": None, "medium": "GPU",
                               "lora_name": None}]])
        until(lambda: self.prefix("trt-b", prompt, TOKEN_B), keepalive=lambda: t.send([time.time(), []]))
        self.assertEqual(self.prefix("trt-b", prompt, TOKEN_B)["gpu"], 32)
        self.assertIsNone(self.prefix("trt-b", prompt, TOKEN_A))
        status, answer = self.up.post("/v1/lookup", {"tokens": prompt}, token="wrong" * 8)
        self.assertEqual(status, 401, answer)

    def test_4_sglang_pages_join_and_dp_ranks_are_instances(self):
        s = self.sglang
        prompt = tokens(9000, 40)
        # SGLang's radix cache: one-token pages, positional arrays, [ts, events, dp_rank].
        pages = [["BlockStored", [100 + i], (100 + i - 1) if i else None, [t], 1, None] for i, t in enumerate(prompt)]
        s.send([time.time(), pages[:20], 0])
        until(lambda: self.prefix("sglang-a", prompt), keepalive=lambda: s.send([time.time(), [], 0]))
        s.send([time.time(), pages[20:], 0])
        until(lambda: self.prefix("sglang-a", prompt) == {"gpu": 32, "host": 32, "disk": 32})
        s.send([time.time(), [["BlockStored", [1], None, prompt[:16], 16, None]], 1])
        until(lambda: self.prefix("sglang-a/dp1", prompt) == {"gpu": 16, "host": 16, "disk": 16})
        # Routing: the instance with the longest prefix, or the one candidate named.
        status, answer = self.up.post("/v1/route", {"tokens": prompt, "model": "llama"})
        self.assertEqual((status, answer["instance"], answer["prefix_tokens"]), (200, "sglang-a", 32), answer)
        self.assertNotIn("trt-b", [c["name"] for c in answer["candidates"]], "another tenant's engine is never offered")
        status, answer = self.up.post("/v1/route", {"tokens": prompt, "model": "llama", "candidates": ["sglang-a/dp1"]})
        self.assertEqual(answer["instance"], "sglang-a/dp1", answer)
        self.assertEqual([c["name"] for c in answer["candidates"]], ["sglang-a/dp1"])
        # The gateway's load of each candidate: sglang-a prefills a block less than dp1 but
        # runs 40 blocks, so the idle dp1 wins; one load per candidate or a 400.
        both = ["sglang-a", "sglang-a/dp1"]
        status, answer = self.up.post("/v1/route", {"tokens": prompt, "model": "llama", "candidates": both,
                                                    "candidate_active_blocks": [40, 0]})
        self.assertEqual((status, answer["instance"]), (200, "sglang-a/dp1"), answer)
        self.assertEqual([c["active_blocks"] for c in answer["candidates"]], [0, 40], answer)
        status, answer = self.up.post("/v1/route", {"tokens": prompt, "model": "llama", "candidates": both,
                                                    "candidate_active_blocks": [40]})
        self.assertEqual(status, 400, answer)
        self.assertIn("1 entries for 2 candidates", answer["error"])
        # The same from `kvtier route`, the prompt's token ids in a file (a JSON array).
        tokens_file = os.path.join(self.up.dir.name, "prompt.json")
        with open(tokens_file, "w") as f:
            json.dump(prompt, f)
        self.assertEqual(self.route(tokens_file, "--model", "llama"),
                         self.up.post("/v1/route", {"tokens": prompt, "model": "llama"})[1])
        self.assertEqual(self.route(tokens_file, "--model", "llama", "--candidates", "sglang-a/dp1")["instance"],
                         "sglang-a/dp1")
        looked_up = self.route(tokens_file, "--lookup")
        self.assertEqual({i["name"]: i["prefix_tokens"] for i in looked_up["instances"]},
                         {"sglang-a": 32, "sglang-a/dp1": 16}, looked_up)
        with open(tokens_file, "w") as f:
            f.write("9000 9001 minus-one")
        refused = subprocess.run([KVTIER_BIN, "route", "--http", self.up.http, "--token", TOKEN_A,
                                  "--tokens-file", tokens_file], capture_output=True, text=True, timeout=30)
        self.assertEqual(refused.returncode, 2, refused.stderr)
        self.assertIn('entry 3 ("minus-one") is not a token id', refused.stderr)
        s.send([time.time(), [["AllBlocksCleared"]], 0])
        until(lambda: self.prefix("sglang-a", prompt) is None)
        self.assertIsNotNone(self.prefix("sglang-a/dp1", prompt), "a clear of rank 0 leaves rank 1")

    def test_5_a_restart_and_a_replay_that_cannot_reach_back_clear_the_engine(self):
        p = self.vllm
        old = tokens(11000, 16)
        p.send(vllm_batch([vllm_stored([1101], None, old)]))
        until(lambda: self.prefix("vllm-a", old))
        # The publisher restarts: its numbers start at 0 again and its old blocks are gone.
        p.restart()
        fresh = tokens(12000, 16)
        p.send(vllm_batch([vllm_stored([1201], None, fresh)]))
        until(lambda: self.prefix("vllm-a", fresh))
        self.assertIsNone(self.prefix("vllm-a", old))
        self.assertGreaterEqual(self.up.metric('kvtier_engine_clears_total{engine="vllm-a",reason="restart"}'), 1)
        # Three messages missed, and the publisher's buffer no longer holds the first two.
        p.send(vllm_batch([]), live=False)
        p.send(vllm_batch([]), live=False)
        gone = p.send(vllm_batch([vllm_stored([1301], None, tokens(13000, 16))]), live=False)
        p.forget_before(gone)
        later = tokens(14000, 16)
        p.send(vllm_batch([vllm_stored([1401], None, later)]))
        until(lambda: self.prefix("vllm-a", later))
        self.assertIsNone(self.prefix("vllm-a", fresh), "blocks from before the lost messages are cleared")
        self.assertIsNotNone(self.prefix("vllm-a", tokens(13000, 16)), "what the replay still had is applied")
        self.assertGreaterEqual(
            self.up.metric('kvtier_engine_clears_total{engine="vllm-a",reason="replay_too_short"}'), 1)


def engine_config(name, publisher):
    return ("coordinator:\n  engines:\n    - {name: %s, events: \"tcp://127.0.0.1:%d\", replay: \"tcp://127.0.0.1:%d\", "
            "format: vllm, tokens_per_block: 16, tenant: team-a}\n" % (name, publisher.events_port, publisher.replay_port))


class EngineReloadTest(unittest.TestCase):
    def test_sighup_adds_and_removes_engines_and_a_broken_file_changes_nothing(self):
        one, two = Publisher(), Publisher()
        up = KvtierUpWithEngines(config_text=engine_config("one", one))
        try:
            prompt = tokens(20000, 32)
            instances = lambda: up.lookup(prompt)  # noqa: E731
            one.send(vllm_batch([vllm_stored([1, 2], None, prompt)]))
            until(lambda: "one" in instances(), keepalive=lambda: one.send(vllm_batch([])))
            up.write_config(engine_config("two", two))
            up.process.send_signal(signal.SIGHUP)
            until(lambda: "one" not in instances())
            two.send(vllm_batch([vllm_stored([5, 6], None, prompt)]))
            until(lambda: "two" in instances(), keepalive=lambda: two.send(vllm_batch([])))
            up.write_config("coordinator:\n  engines:\n    - {name: three, events: \"http://nowhere\"}\n")
            up.process.send_signal(signal.SIGHUP)
            until(lambda: "not tcp://host:port" in up.log_text())
            self.assertIn("two", instances(), "a configuration that does not load changes nothing")
            self.assertIsNone(up.process.poll())
        finally:
            up.stop()
            one.close()
            two.close()


class EngineRoutedLoadTest(unittest.TestCase):
    def test_engines_report_no_load_so_each_route_counts_as_one_on_its_choice(self):
        one, two = Publisher(), Publisher()
        specs = ["name=%s;events=tcp://127.0.0.1:%d;format=vllm;tokens_per_block=16;tenant=team-a;model=llama"
                 % (name, p.events_port) for name, p in (("e-one", one), ("e-two", two))]
        up = KvtierUpWithEngines(specs)
        try:
            # Both engines hold one block, sent again until the late subscriptions see it.
            warm = tokens(40000, 16)
            until(lambda: len(up.lookup(warm, model="llama")) == 2,
                  keepalive=lambda: [p.send(vllm_batch([vllm_stored([1], None, warm)])) for p in (one, two)])
            both = ["e-one", "e-two"]
            went = [up.post("/v1/route", {"tokens": tokens(50000 + 100 * i, 64), "model": "llama",
                                          "candidates": both})[1]["instance"] for i in range(4)]
            self.assertEqual(sorted(went), ["e-one", "e-one", "e-two", "e-two"], went)
            status, answer = up.post("/v1/route", {"tokens": tokens(60000, 64), "model": "llama",
                                                   "candidates": both, "candidate_active_blocks": [0, 9]})
            self.assertEqual((status, answer["instance"]), (200, "e-one"), answer)
            self.assertEqual([c["active_blocks"] for c in answer["candidates"]], [0, 9], "the gateway's loads")
        finally:
            up.stop()
            one.close()
            two.close()


class EngineDiscoveryTest(unittest.TestCase):
    def test_each_address_of_a_discovered_host_is_an_engine(self):
        """discovery=dns: the host of `events` (a headless Service in Kubernetes; localhost
        here) names the engines, one per address."""
        publisher = Publisher()
        spec = ("name=fleet;events=tcp://localhost:%d;replay=tcp://localhost:%d;format=vllm;"
                "tokens_per_block=16;tenant=team-a;discovery=dns" % (publisher.events_port, publisher.replay_port))
        up = KvtierUpWithEngines([spec])
        try:
            prompt = tokens(30000, 32)
            publisher.send(vllm_batch([vllm_stored([1, 2], None, prompt)]))
            found = until(lambda: up.lookup(prompt).get("fleet-127.0.0.1"),
                          keepalive=lambda: publisher.send(vllm_batch([])))
            self.assertEqual(found["prefix_tokens"], 32)
            self.assertNotIn("fleet", up.lookup(prompt))
            self.assertGreaterEqual(up.metric("kvtier_engine_discovered_instances"), 1)
            self.assertGreaterEqual(up.metric('kvtier_engine_discovery_resolutions_total{result="ok"}'), 1)
        finally:
            up.stop()
            publisher.close()


if __name__ == "__main__":
    unittest.main()
