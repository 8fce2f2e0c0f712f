#!/usr/bin/env python3
"""Fails when a library links, or a source includes, across kvtier's dependency lines.

The lines (README "Layout", docs/architecture.md):
  - common <- gpu, storage <- services: common/ includes only common/; gpu/ and storage/
    only themselves and common/;
  - inside services/, nodes (worker, store) and the SDK (client) never reach the
    coordinator's index, cluster, engines or server; they talk to it through its client
    library (kvtier::coordinator_client: services/coordinator/rpc/node_link.h, node_agent.h);
  - generated Cap'n Proto headers (*.capnp.h) are included only under services/*/rpc/ and
    services/rpc/ (tests and test helpers aside);
  - no production library links a benchmark driver or a test helper.
Links are checked on the transitive closure of the libraries' declared kvtier
dependencies, as cmake/KvtierTargets.cmake records them at configure time.

Usage: check_deps.py SOURCE_DIR LIBRARY_GRAPH_FILE
"""
import os
import re
import sys

NODE_AND_SDK_LIBRARIES = {"worker_pool", "worker", "worker_rpc", "store_tiers", "store_stream", "store_rpc",
                          "client"}
COORDINATOR_LIBRARIES = {"coordinator_index", "coordinator_cluster", "coordinator_engines",
                         "coordinator_engine_feed", "coordinator_rpc"}
# Libraries a node or the kvtier binary's serving path must never link.
BENCH_AND_TEST_LIBRARIES = {"bench", "bench_rpc", "held_port", "testing", "rpc_testing"}
# Libraries that may link them: the CLI (its `kvtier bench` command) and the helpers themselves.
MAY_LINK_BENCH = {"cli", "bench", "bench_rpc", "testing", "rpc_testing"}
LOWER_LAYERS = {"common": {"common"}, "gpu": {"common", "gpu"}, "storage": {"common", "storage"}}
COORDINATOR_CLIENT_HEADERS = {"services/coordinator/rpc/node_link.h", "services/coordinator/rpc/node_agent.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def read_graph(path):
    graph = {}
    with open(path) as f:
        for line in f:
            if ":" not in line:
                continue
            name, deps = line.split(":", 1)
            graph.setdefault(name.strip(), set()).update(deps.split())
    return graph


def closure(graph, name):
    seen, todo = set(), [name]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def link_violations(graph):
    out = []
    for name in sorted(graph):
        reached = closure(graph, name)
        if name in NODE_AND_SDK_LIBRARIES:
            for bad in sorted(reached & COORDINATOR_LIBRARIES):
                out.append("library %s links %s: nodes and the SDK reach the coordinator through "
                           "coordinator_client only" % (name, bad))
        if name not in MAY_LINK_BENCH:
            for bad in sorted(reached & BENCH_AND_TEST_LIBRARIES):
                out.append("library %s links %s: benchmark drivers and test helpers stay out of the product" %
                           (name, bad))
    return out


def is_test_source(path):
    base = os.path.basename(path)
    return ("/testing/" in path or base.endswith(("_test.cc", "_bench.cc", "_fuzz.cc", "_testing.h")) or
            "/thread_safety/" in path)


def sources(root):
    for top in ("common", "gpu", "storage", "services"):
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if name.endswith((".h", ".cc", ".cu", ".cuh")):
                    full = os.path.join(directory, name)
                    yield os.path.relpath(full, root), full


def include_violations(root):
    out = []
    for path, full in sources(root):
        with open(full, errors="replace") as f:
            included = INCLUDE.findall(f.read())
        top = path.split("/", 1)[0]
        test = is_test_source(path)
        for inc in included:
            inc_top = inc.split("/", 1)[0]
            if inc_top in LOWER_LAYERS or inc_top in ("services", "tests", "examples"):
                if top in LOWER_LAYERS and not test and inc_top not in LOWER_LAYERS[top]:
                    out.append("%s includes %s: %s/ may include only %s" %
                               (path, inc, top, ", ".join(sorted(x + "/" for x in LOWER_LAYERS[top]))))
            if inc.endswith(".capnp.h") and not test and not re.match(r"services/([^/]+/)?rpc/", path):
                out.append("%s includes %s: generated Cap'n Proto types stay in services/*/rpc/" % (path, inc))
            node_or_sdk = re.match(r"services/(worker|store|client)/", path)
            if node_or_sdk and not test and inc.startswith("services/coordinator/") and \
                    inc not in COORDINATOR_CLIENT_HEADERS:
                out.append("%s includes %s: nodes and the SDK use only the coordinator's client (%s)" %
                           (path, inc, ", ".join(sorted(COORDINATOR_CLIENT_HEADERS))))
            if path.startswith("services/client/") and not test and inc.startswith("services/worker/"):
                out.append("%s includes %s: the SDK does not build on the worker's internals" % (path, inc))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    root, graph_file = sys.argv[1], sys.argv[2]
    graph = read_graph(graph_file)
    if "common" not in graph or "client" not in graph:
        sys.exit("%s lists no kvtier libraries: was it written by this tree's configure?" % graph_file)
    problems = link_violations(graph) + include_violations(root)
    for p in problems:
        print(p)
    print("%d libraries, dependency lines %s" % (len(graph), "crossed %d times" % len(problems) if problems else "kept"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
