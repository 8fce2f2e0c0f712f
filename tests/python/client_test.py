"""The Python binding (`import kvtier`) against a real `kvtier up` on loopback ports.

Run by ctest with PYTHONPATH at the built module and KVTIER_BIN at the kvtier binary.
"""
import array
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import kvtier

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing", "python"))
from kvtier_banner import read_banner  # noqa: E402

KVTIER_BIN = os.environ.get("KVTIER_BIN", "build/bin/kvtier")


class KvtierUp:
    """`kvtier up` on free loopback ports in a scratch data directory."""

    def __init__(self, extra=()):
        self.dir = tempfile.TemporaryDirectory(prefix="kvtier-python-")
        self.process = subprocess.Popen(
            [KVTIER_BIN, "up", "--data-dir", self.dir.name, "--coordinator-listen", "127.0.0.1:0",
             "--metrics-port", "0", "--metrics-bind", "127.0.0.1", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        banner, values = read_banner(self.process)
        self.banner = banner
        if "rpc" not in values:
            self.stop()
            raise RuntimeError("kvtier up did not start: " + banner)
        self.address = values["rpc"]
        with open(os.path.join(self.dir.name, "token")) as f:
            self.token = f.read().strip()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=20)
        self.process.stdout.close()
        self.dir.cleanup()
        return code


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = KvtierUp()
        # kvtier up's default layout (common/config.h): 4 layers, 2 KV heads, 64 dims,
        # 16 tokens per block, fp16.
        cls.layout = kvtier.Layout(num_layers=4, num_kv_heads=2, head_dim=64, tokens_per_block=16, dtype="fp16")

    @classmethod
    def tearDownClass(cls):
        self_code = cls.up.stop()
        assert self_code == 0, "kvtier up exits 0 on SIGTERM"

    def connect(self):
        return kvtier.Client(self.up.address, token=self.up.token)

    def test_keys_come_from_any_uint32_buffer_or_list(self):
        prompt = list(range(1000, 1040))
        from_list = kvtier.block_keys(prompt, 16)
        self.assertEqual(len(from_list), 2)  # 40 tokens: two full blocks
        self.assertEqual(kvtier.block_keys(array.array("I", prompt), 16), from_list)
        self.assertEqual(kvtier.block_keys(memoryview(array.array("I", prompt)), 16), from_list)
        with self.assertRaises(kvtier.Error) as wrong:
            kvtier.block_keys(array.array("d", [1.0, 2.0]), 16)
        self.assertEqual(wrong.exception.args[0], "INVALID_ARGUMENT")
        self.assertIn("uint32", wrong.exception.args[1])

    def test_extra_keys_match_the_reference_encoding(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vectors"))
        import block_keys as reference  # tests/vectors: the encoding written from its spec alone
        tokens = list(range(1, 9))
        extra = dict(lora_id=7, model_tag="llama3-8b/bf16", extra=["img:abc"])
        self.assertEqual(kvtier.block_keys(tokens, 4, **extra), reference.chain("", tokens, 4, **extra))
        self.assertEqual(kvtier.block_keys(tokens, 4), reference.chain("", tokens, 4))
        self.assertNotEqual(kvtier.block_keys(tokens, 4, lora_id=8), kvtier.block_keys(tokens, 4, lora_id=7))

    def test_commit_takes_token_ranges_and_the_decode_retention(self):
        client = self.connect()
        prompt = array.array("I", range(17000, 17048))  # tokens no other test sends
        keys = kvtier.block_keys(prompt, 16)
        client.allocate(1, keys, len(prompt))
        committed = client.commit(1, keys, ranges=[(0, 16, 90, None), (16, None, 20, 30.0)],
                                  decode_priority=5, decode_duration_s=1.5)
        self.assertEqual(committed, 3)
        client.free(1)
        with self.assertRaises(kvtier.Error) as bad:
            client.allocate(2, keys, len(prompt))
            client.commit(2, keys, ranges=[(0, None, 101, None)])
        self.assertEqual(bad.exception.args[0], "INVALID_ARGUMENT")
        self.assertIn("101", bad.exception.args[1])
        with self.assertRaises(kvtier.Error) as negative:
            client.commit(2, keys, ranges=[(0, None, 50, -1.0)])
        self.assertIn("retention duration", negative.exception.args[1])

    def test_a_prompt_computed_in_the_mapped_pool_is_reused(self):
        client = self.connect()
        self.assertEqual(client.tenant, "default")
        prompt = array.array("I", range(5000, 5048))  # three blocks
        keys = kvtier.block_keys(prompt, 16)
        # Sequence 1 computes the three blocks in place and commits them.
        pool = kvtier.MappedPool(client.attach_pool(0, self.layout))
        table = client.allocate(1, keys, len(prompt))
        self.assertEqual(table.reused_blocks, 0)
        self.assertEqual(len(table.block_ids), 3)
        for i, block_id in enumerate(table.block_ids):
            block = pool.block(block_id)
            self.assertEqual(len(block), self.layout.bytes_per_block)
            block[:4] = bytes([i, i, i, i])
        self.assertEqual(client.commit(1, keys, priority=80), 3)
        client.free(1)
        # The coordinator learns them (events travel every 100 ms) and routes there.
        deadline = time.monotonic() + 5
        while client.lookup(keys)["matched_blocks"] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        found = client.lookup(keys)
        self.assertEqual(found["matched_blocks"], 3)
        self.assertEqual(found["locations"][0][0][1], "gpu")
        self.assertEqual(len(found["sources"]), 1, "the one node holding them, for onboard(sources=...)")
        self.assertEqual(client.route(keys)[1], 3)
        # Sequence 2, same prompt: blocks reused in place, with the bytes written above.
        again = client.allocate(2, keys, len(prompt))
        self.assertEqual(again.reused_blocks, 3)
        whole = memoryview(pool)
        self.assertFalse(whole.readonly)
        stride = len(whole) // client.attach_pool(0, self.layout).num_blocks
        for i, block_id in enumerate(again.block_ids):
            self.assertEqual(bytes(whole[block_id * stride:block_id * stride + 4]), bytes([i] * 4))
        client.free(2)
        # A prompt nobody holds, with a source that is no live node: nothing onboarded.
        fresh = kvtier.block_keys(list(range(9000, 9016)), 16)
        client.allocate(3, fresh, 16)
        nothing = client.onboard(3, fresh, sources=["no-such-node/worker"])
        self.assertEqual((nothing.onboarded_blocks, nothing.from_remote), (0, 0))
        client.free(3)
        self.assertGreaterEqual(client.worker_stats()["total_blocks"], 3)

    def test_a_prompt_ending_inside_a_committed_block_matches_it_partially(self):
        client = self.connect()
        conversation = array.array("I", range(7000, 7032))  # two blocks of 16 tokens
        keys = kvtier.block_keys(conversation, 16)
        client.allocate(4, keys, len(conversation))
        self.assertEqual(client.commit(4, keys, tokens=conversation), 2)
        client.free(4)
        # A prompt of 16 + 10 tokens: block 0 whole, then 10 of block 1's 16 tokens.
        prompt = conversation[:26]
        prompt_keys = kvtier.block_keys(prompt, 16)
        deadline = time.monotonic() + 5
        found = client.lookup(prompt_keys, tail_tokens=prompt[16:])
        while found["partial_match_tokens"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
            found = client.lookup(prompt_keys, tail_tokens=prompt[16:])
        self.assertEqual(found["matched_blocks"], 1)
        self.assertEqual(found["partial_match_tokens"], 10)
        self.assertEqual(found["partial_block_tokens"], 16)
        self.assertEqual(found["partial_block_locations"][0][1], "gpu")
        self.assertEqual(found["scores"][0][3], 10, "the node holding it can reuse 10 tokens")
        node, prefix_blocks, reusable = client.route(prompt_keys, tail_tokens=prompt[16:])
        self.assertEqual((prefix_blocks, reusable), (1, 10), "routed where the tail can be reused")
        self.assertEqual(client.route(prompt_keys, candidates=["no-such-worker", node])[0], node)
        with self.assertRaises(kvtier.Error) as nobody:
            client.route(prompt_keys, candidates=["no-such-worker"])
        self.assertEqual(nobody.exception.args[0], "UNAVAILABLE")

    def test_a_static_sequence_keeps_its_reserved_table_as_it_decodes(self):
        client = self.connect()
        # 20 prompt tokens, reserved to 64 (four blocks of 16): decoding moves nothing.
        table = client.allocate(20, [kvtier.block_keys(list(range(7000, 7016)), 16)[0]], 20,
                                reserve_tokens=64)
        self.assertEqual(len(table.block_ids), 4)
        for tokens in range(21, 65):
            self.assertEqual(client.extend(20, tokens).block_ids, table.block_ids)
        with self.assertRaises(kvtier.Error) as past:
            client.extend(20, 65)
        self.assertEqual(past.exception.args[0], "OUT_OF_RANGE")
        self.assertIn("reserved 64 tokens", past.exception.args[1])
        client.free(20)
        # Dynamic (the default): the table grows by a block past 32 tokens.
        grown = client.allocate(21, [], 15)
        self.assertEqual(len(grown.block_ids), 1)
        self.assertEqual(len(client.extend(21, 33).block_ids), 3)
        client.free(21)

    def test_a_sink_window_sequence_writes_its_ring_in_a_static_table(self):
        """StreamingLLM-style: 16 sink tokens and a 32-token window in a static sequence of
        three blocks; chunks of 16 fill it, then the window rolls over its own slots."""
        client = self.connect()
        table = client.allocate(30, [], 1, reserve_tokens=48).block_ids
        self.assertEqual(len(table), 3)
        ring = kvtier.SinkWindow(sink_tokens=16, window_tokens=32, chunk_tokens=16, tokens_per_block=16,
                                 block_table=table)
        self.assertEqual(ring.capacity_tokens, 48)
        slots = lambda block: [table[block] * 16 + t for t in range(16)]  # noqa: E731
        for chunk, block in ((0, 0), (1, 1), (2, 2)):  # filling
            self.assertEqual(ring.begin_chunk(chunk), slots(block))
            ring.end_chunk(chunk)
        self.assertFalse(ring.steady_state)
        self.assertEqual(ring.begin_chunk(3), slots(1), "the window's oldest block is written over")
        self.assertTrue(ring.steady_state)
        self.assertEqual(ring.visible_slots(), slots(0) + slots(2) + slots(1), "sinks, then oldest to newest")
        self.assertEqual(ring.visible_block_table(), [table[0], table[2], table[1]], "the same, as blocks")
        ring.end_chunk(3)
        self.assertEqual(ring.begin_chunk(3), slots(1), "the same chunk again rewrites its tokens")
        with self.assertRaises(kvtier.Error) as skipped:
            ring.end_chunk(4)
        self.assertEqual(skipped.exception.args[0], "FAILED_PRECONDITION")
        ring.end_chunk(3)
        with self.assertRaises(kvtier.Error) as bad:
            ring.begin_chunk(7)
        self.assertEqual(bad.exception.args[0], "INVALID_ARGUMENT")
        self.assertEqual(client.extend(30, 48).block_ids, table, "a static table never moves")
        client.free(30)

    def test_errors_carry_the_status_code(self):
        client = self.connect()
        keys = kvtier.block_keys(list(range(32)), 16)
        with self.assertRaises(kvtier.Error) as wrong_count:
            client.allocate(7, keys, 64)  # 64 tokens are four full blocks, not two
        self.assertEqual(wrong_count.exception.args[0], "INVALID_ARGUMENT")
        with self.assertRaises(kvtier.Error) as unknown:
            client.free(12345)
        self.assertEqual(unknown.exception.args[0], "NOT_FOUND")
        other_layout = kvtier.Layout(num_layers=3, num_kv_heads=2, head_dim=64, tokens_per_block=16)
        with self.assertRaises(kvtier.Error) as mismatch:
            client.attach_pool(0, other_layout)
        self.assertEqual(mismatch.exception.args[0], "FAILED_PRECONDITION")
        with self.assertRaises(kvtier.Error) as bad_token:
            kvtier.Client(self.up.address, token="not-the-token")
        self.assertEqual(bad_token.exception.args[0], "UNAUTHENTICATED")
        with self.assertRaises(kvtier.Error):
            kvtier.Layout(num_layers=1, num_kv_heads=1, head_dim=64, tokens_per_block=16, dtype="fp64")


class WindowedPoolsTest(unittest.TestCase):
    """A Gemma-like model from configuration: layers alternate a 32-token sliding window and
    a 128-token one (TensorRT-LLM's max_attention_window, repeated over the 4 layers), with 16
    sink tokens: one pool per window, each holding its layers, memory split by window."""

    def test_each_window_is_a_pool_of_its_layers_reached_through_the_sdk(self):
        up = KvtierUp(["--worker-max-attention-window", "32,128", "--worker-sink-tokens", "16"])
        try:
            self.assertIn("worker pools 0: L2/H2/D64/T16/fp16/W32/S16 (layers 0, 2)", up.banner)
            self.assertIn("1: L2/H2/D64/T16/fp16/W128/S16 (layers 1, 3)", up.banner)
            client = kvtier.Client(up.address, token=up.token)
            stats = client.worker_stats()
            self.assertEqual(stats["pool_layouts"], ["L2/H2/D64/T16/fp16/W32/S16", "L2/H2/D64/T16/fp16/W128/S16"])
            windows = {}
            for pool, window in ((0, 32), (1, 128)):
                windows[pool] = kvtier.Layout(num_layers=2, num_kv_heads=2, head_dim=64, tokens_per_block=16,
                                              dtype="fp16", attention_window=window, sink_tokens=16)
            sizes = [client.attach_pool(pool, windows[pool]).num_blocks for pool in (0, 1)]
            self.assertEqual(sum(sizes), stats["total_blocks"])
            self.assertAlmostEqual(sizes[1] / sizes[0], 4.0, delta=0.01, msg="shares of 32 and 128 tokens")
            with self.assertRaises(kvtier.Error) as mismatch:
                client.attach_pool(0, windows[1])
            self.assertEqual(mismatch.exception.args[0], "FAILED_PRECONDITION")
            # One prompt through both pools (a sequence each), committed, then reused in both.
            prompt = array.array("I", range(1000, 1096))
            keys = kvtier.block_keys(prompt, 16)
            for pool in (0, 1):
                self.assertEqual(client.allocate(10 + pool, keys, len(prompt), pool_id=pool).reused_blocks, 0)
                self.assertEqual(client.commit(10 + pool, keys, priority=80), 6)
                client.free(10 + pool)
            deadline = time.monotonic() + 5
            while client.lookup(keys)["matched_blocks"] < 6 and time.monotonic() < deadline:
                time.sleep(0.02)
            found = client.lookup(keys)
            self.assertEqual(found["matched_blocks"], 6)
            self.assertEqual(sorted(found["locations"][5]), [(found["sources"][0], "gpu", 0),
                                                             (found["sources"][0], "gpu", 1)])
            for pool in (0, 1):
                self.assertEqual(client.allocate(20 + pool, keys, len(prompt), pool_id=pool).reused_blocks, 6)
                client.free(20 + pool)
            self.assertEqual(client.lookup_local(keys, pool_ids=[0, 1]), 6)
        finally:
            self.assertEqual(up.stop(), 0)

    def test_one_sequence_spans_the_pools_and_reuses_what_both_serve(self):
        up = KvtierUp(["--worker-max-attention-window", "32,128", "--worker-sink-tokens", "16"])
        try:
            client = kvtier.Client(up.address, token=up.token)
            prompt = array.array("I", range(2000, 2096))  # 6 blocks of 16
            keys = kvtier.block_keys(prompt, 16)
            first = client.allocate(1, keys, len(prompt), pool_ids=[0, 1])
            self.assertEqual(sorted(first.tables), [0, 1])
            self.assertEqual([len(first.tables[p]) for p in (0, 1)], [6, 6])
            self.assertEqual(first.block_ids, first.tables[0])
            self.assertEqual(client.commit(1, keys, priority=80), 6, "six keys, cached in both pools")
            client.free(1)
            self.assertEqual(client.lookup_local(keys, pool_ids=[0, 1]), 6)
            # The prompt grows by a block: both pools reuse its six. The 32-token pool needs
            # only its sink block and its last window (blocks 4 and 5) of them; the 128-token
            # pool needs all six.
            longer = array.array("I", range(2000, 2112))
            second = client.allocate(2, kvtier.block_keys(longer, 16), len(longer), pool_ids=[0, 1])
            self.assertEqual(second.reused_blocks, 6)
            self.assertEqual([b == kvtier.NO_BLOCK for b in second.tables[0]],
                             [False, True, True, True, False, False, False])
            self.assertNotIn(kvtier.NO_BLOCK, second.tables[1])
            self.assertEqual(second.tables[1][:6], first.tables[1], "the same blocks, in place")
            grown = client.extend(2, len(longer) + 16)
            self.assertEqual([len(grown.tables[p]) for p in (0, 1)], [8, 8], "extend grows both")
            with self.assertRaises(kvtier.Error) as twice:
                client.allocate(3, keys, len(prompt), pool_ids=[1, 1])
            self.assertEqual(twice.exception.args[0], "INVALID_ARGUMENT")
            self.assertIn("pool 1 is listed twice", twice.exception.args[1])
            with self.assertRaises(kvtier.Error) as none:
                client.lookup_local(keys, pool_ids=[])
            self.assertEqual(none.exception.args[0], "INVALID_ARGUMENT")
            with self.assertRaises(kvtier.Error) as unknown:
                client.lookup_local(keys, pool_ids=[0, 9])
            self.assertEqual(unknown.exception.args[0], "NOT_FOUND")
        finally:
            self.assertEqual(up.stop(), 0)

    def test_a_mixed_list_with_full_attention_and_sinks_without_windows_are_refused(self):
        for flags, named in ((["--worker-max-attention-window", "1024,0"], "mixes 0"),
                             (["--worker-sink-tokens", "4"], "worker.sink_tokens 4 needs windowed")):
            with tempfile.TemporaryDirectory() as data:
                done = subprocess.run([KVTIER_BIN, "up", "--data-dir", data, "--coordinator-listen", "127.0.0.1:0",
                                       "--metrics-port", "0", *flags], capture_output=True, text=True, timeout=30)
            self.assertNotEqual(done.returncode, 0, flags)
            self.assertIn(named, done.stderr, flags)


if __name__ == "__main__":
    unittest.main()
