"""Measures what clients that never authenticate cost a `kvtier up` (docs/benchmarks.md#hostile-clients-and-chaos).

Prints RSS (VmRSS) of the server before and after 2,000 idle connections from 40
loopback addresses, after its authentication deadline, and around 30 frames that each
announce a 64 MiB message and send 8 MiB of it. A measurement, not a test: it asserts
nothing (tests/hostile/hostile_test.py holds the bounds).

Run: PYTHONPATH=build/python KVTIER_BIN=build/bin/kvtier python3 tests/hostile/measure_preauth.py
"""
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile_test as hostile  # noqa: E402

MIB = 2**20


def idle_connections(up, addresses=40, each=50):
    held = []
    for a in range(2, 2 + addresses):
        for _ in range(each):
            s = socket.socket()
            s.bind(("127.0.0.%d" % a, 0))
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", up.port))
                held.append(s)
            except OSError:
                s.close()
    return held


def main():
    up = hostile.Node("up")
    try:
        time.sleep(1)
        before = up.rss_bytes()
        held = idle_connections(up)
        time.sleep(1)
        print("%d idle connections from 40 addresses: RSS %.1f -> %.1f MiB; waiting %d, shed %d, refused %d"
              % (len(held), before / MIB, up.rss_bytes() / MIB, up.metric("kvtier_rpc_unauthenticated_connections"),
                 up.metric("kvtier_rpc_connections_shed_total"), up.metric("kvtier_rpc_connections_refused_total")))
        time.sleep(5)
        print("after the deadline: waiting %d, closed at the deadline %d, RSS %.1f MiB"
              % (up.metric("kvtier_rpc_unauthenticated_connections"),
                 up.metric("kvtier_rpc_connection_errors_total", 'reason="auth_deadline"'), up.rss_bytes() / MIB))
        for s in held:
            s.close()
        before = peak = up.rss_bytes()
        frames = []
        for _ in range(30):
            s = hostile.attacker_socket(up.port)
            frames.append(s)
            try:
                s.sendall(struct.pack("<II", 0, 8 << 20))
                s.sendall(b"\0" * (8 << 20))
            except OSError:
                pass  # closed at the header
            peak = max(peak, up.rss_bytes())
        print("30 frames announcing 64 MiB, unauthenticated: RSS %.1f -> at most %.1f MiB" % (before / MIB, peak / MIB))
        for s in frames:
            s.close()
    finally:
        up.stop()


if __name__ == "__main__":
    main()
