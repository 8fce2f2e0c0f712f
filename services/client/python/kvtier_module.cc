// The Python binding of the client SDK (services/client/client.h): `import kvtier`.
//
//   c = kvtier.Client("127.0.0.1:7400", token=open("kvtier-data/token").read().strip())
//   keys = kvtier.block_keys(array.array("I", prompt), 16)   # any buffer of uint32, or a list
//   table = c.allocate(1, keys, len(prompt))
//   pool = kvtier.MappedPool(c.attach_pool(0, kvtier.Layout(32, 8, 128, 16, "bf16")))
//   memoryview(pool)  # the node's blocks, writable, zero-copy (buffer protocol)
//   c.commit(1, keys); c.free(1)
//
// Keys are (hi, lo) tuples. A failed call raises kvtier.Error with args (CODE, message),
// CODE a canonical status name ("RESOURCE_EXHAUSTED", ...). Blocking calls release the GIL.
#include <optional>
#include <tuple>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common/sink_window.h"
#include "services/client/client.h"

namespace py = pybind11;

namespace kvtier::client {

struct StatusError {
  Status status;
};

namespace {

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) throw StatusError{result.status()};
  return std::move(result).value();
}

void OkOrThrow(const Status& status) {
  if (!status.ok()) throw StatusError{status};
}

using PyKey = std::pair<uint64_t, uint64_t>;

std::vector<BlockKey> ToKeys(const std::vector<PyKey>& keys) {
  std::vector<BlockKey> out;
  out.reserve(keys.size());
  for (const auto& [hi, lo] : keys) out.push_back({hi, lo});
  return out;
}

std::vector<PyKey> FromKeys(const std::vector<BlockKey>& keys) {
  std::vector<PyKey> out;
  out.reserve(keys.size());
  for (const BlockKey& k : keys) out.emplace_back(k.hi, k.lo);
  return out;
}

// Tokens from any buffer of 32-bit unsigned integers (array('I'), numpy uint32), or from a
// sequence of ints.
std::vector<uint32_t> ToTokens(const py::object& tokens) {
  if (py::isinstance<py::buffer>(tokens) && !py::isinstance<py::bytes>(tokens)) {
    const py::buffer_info info = py::reinterpret_borrow<py::buffer>(tokens).request();
    if (info.ndim != 1 || info.itemsize != 4 ||
        (info.format != "I" && info.format != "=I" && info.format != "<I" && info.format != "L" &&
         info.format != "u4")) {
      throw StatusError{InvalidArgumentError(
          "tokens: a buffer of one dimension of uint32 is needed, got format '" + info.format +
          "' of " + std::to_string(info.ndim) + " dimensions")};
    }
    const auto* data = static_cast<const uint32_t*>(info.ptr);
    std::vector<uint32_t> out(static_cast<size_t>(info.shape[0]));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = data[i * static_cast<size_t>(info.strides[0]) / 4];
    return out;
  }
  return tokens.cast<std::vector<uint32_t>>();
}

// An optional token argument: None is no tokens.
std::vector<uint32_t> OptionalTokens(const py::object& tokens) {
  return tokens.is_none() ? std::vector<uint32_t>{} : ToTokens(tokens);
}

Result<KvLayout> MakeLayout(uint32_t layers, uint32_t heads, uint32_t head_dim,
                            uint32_t tokens_per_block, const std::string& dtype, uint32_t window,
                            uint32_t sinks) {
  KVTIER_ASSIGN_OR_RETURN(KvDtype parsed, ParseDtype(dtype));
  return KvLayout::Create({.num_layers = layers,
                           .num_kv_heads = heads,
                           .head_dim = head_dim,
                           .tokens_per_block = tokens_per_block,
                           .dtype = parsed,
                           .attention_window = window,
                           .sink_tokens = sinks});
}

std::optional<Nanos> Seconds(std::optional<double> s) {
  if (!s) return std::nullopt;
  if (!(*s >= 0))
    throw StatusError{InvalidArgumentError("a retention duration must be >= 0 seconds")};
  return std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(*s));
}

// (first_token, last_token or None, priority, duration_s or None) per range, in order.
using PyRange = std::tuple<uint32_t, std::optional<uint32_t>, uint8_t, std::optional<double>>;

// The whole prompt at `priority` unless `ranges` are given; then the decode's own.
RetentionConfig Retention(uint8_t priority, std::optional<double> duration_s,
                          const std::vector<PyRange>& ranges,
                          std::optional<uint8_t> decode_priority,
                          std::optional<double> decode_duration_s) {
  RetentionConfig retention;
  if (ranges.empty()) {
    retention.ranges.push_back(
        {.first_token = 0, .priority = priority, .duration = Seconds(duration_s)});
  }
  for (const auto& [first, last, range_priority, range_duration] : ranges) {
    retention.ranges.push_back({.first_token = first,
                                .last_token = last,
                                .priority = range_priority,
                                .duration = Seconds(range_duration)});
  }
  if (decode_priority) retention.decode_priority = *decode_priority;
  retention.decode_duration = Seconds(decode_duration_s);
  return retention;
}

void BindKeys(py::module_& m) {
  m.def(
      "block_keys",
      [](const py::object& tokens, uint32_t tokens_per_block, uint64_t lora_id,
         const std::string& model_tag, const std::vector<std::string>& extra) {
        if (tokens_per_block == 0)
          throw StatusError{InvalidArgumentError("tokens_per_block: must be positive")};
        return FromKeys(
            Client::BlockKeys(ToTokens(tokens), tokens_per_block, {lora_id, model_tag, extra}));
      },
      py::arg("tokens"), py::arg("tokens_per_block"), py::arg("lora_id") = 0,
      py::arg("model_tag") = "", py::arg("extra") = std::vector<std::string>{},
      "Keys (hi, lo) of every full block of `tokens` (a buffer of uint32 or a list of ints); "
      "lora_id, "
      "model_tag and extra (e.g. multimodal content hashes) change every key, as they change the "
      "KV values.");
}

void BindTypes(py::module_& m) {
  py::class_<KvLayout>(m, "Layout")
      .def(
          py::init([](uint32_t layers, uint32_t heads, uint32_t head_dim, uint32_t tokens_per_block,
                      const std::string& dtype, uint32_t window, uint32_t sinks) {
            return ValueOrThrow(
                MakeLayout(layers, heads, head_dim, tokens_per_block, dtype, window, sinks));
          }),
          py::arg("num_layers"), py::arg("num_kv_heads"), py::arg("head_dim"),
          py::arg("tokens_per_block"), py::arg("dtype") = "fp16", py::arg("attention_window") = 0,
          py::arg("sink_tokens") = 0)
      .def_property_readonly("tokens_per_block", &KvLayout::tokens_per_block)
      .def_property_readonly("bytes_per_block", &KvLayout::bytes_per_block)
      .def("__repr__", [](const KvLayout& l) { return "kvtier.Layout(" + l.Fingerprint() + ")"; });
  py::class_<Allocation>(m, "Allocation")
      .def_readonly("block_ids", &Allocation::block_ids)
      .def_readonly("reused_blocks", &Allocation::reused_blocks)
      .def_readonly("partial_reuse_tokens", &Allocation::partial_reuse_tokens)
      .def_property_readonly("tables", [](const Allocation& a) {
        py::dict tables;  // pool id -> block ids (kvtier.NO_BLOCK outside a window)
        for (const PoolTable& t : a.tables) tables[py::int_(t.pool_id)] = t.block_ids;
        return tables;
      });
  m.attr("NO_BLOCK") = kvtier::client::kNoBlock;
  py::class_<OnboardResult>(m, "OnboardResult")
      .def_readonly("onboarded_blocks", &OnboardResult::onboarded_blocks)
      .def_readonly("cached_blocks", &OnboardResult::cached_blocks)
      .def_readonly("from_host", &OnboardResult::from_host)
      .def_readonly("from_disk", &OnboardResult::from_disk)
      .def_readonly("from_remote", &OnboardResult::from_remote);
  py::class_<PoolMapping>(m, "PoolMapping")
      .def_readonly("pool_id", &PoolMapping::pool_id)
      .def_readonly("num_blocks", &PoolMapping::num_blocks)
      .def_readonly("block_stride_bytes", &PoolMapping::block_stride_bytes)
      .def_readonly("shared_memory_name", &PoolMapping::shared_memory_name)
      .def_readonly("device", &PoolMapping::device)
      .def_property_readonly("cuda_ipc_handle", [](const PoolMapping& p) {
        return py::bytes(reinterpret_cast<const char*>(p.cuda_ipc_handle.data()),
                         p.cuda_ipc_handle.size());
      });
  // The node's blocks, writable in place through the buffer protocol.
  py::class_<MappedPool>(m, "MappedPool", py::buffer_protocol())
      .def(py::init(
          [](const PoolMapping& mapping) { return ValueOrThrow(MappedPool::Map(mapping)); }))
      .def_buffer([](MappedPool& pool) {
        const std::span<uint8_t> bytes = pool.bytes();
        return py::buffer_info(bytes.data(), static_cast<py::ssize_t>(bytes.size()),
                               /*readonly=*/false);
      })
      .def(
          "block",
          [](MappedPool& pool, uint32_t block) {
            const std::span<uint8_t> bytes = pool.block(block);
            return py::memoryview::from_memory(bytes.data(),
                                               static_cast<py::ssize_t>(bytes.size()));
          },
          py::keep_alive<0, 1>());
}

py::dict LookupToDict(const LookupResult& r) {
  py::list locations;
  for (const auto& block : r.locations) {
    py::list here;
    for (const Location& l : block)
      here.append(py::make_tuple(l.node_id, std::string(kvtier::TierName(l.tier)), l.pool_id));
    locations.append(here);
  }
  py::list scores;
  for (const NodeScore& s : r.scores) {
    scores.append(py::make_tuple(s.node_id, s.prefix_blocks, s.score, s.partial_tokens));
  }
  py::list partial_locations;
  for (const Location& l : r.partial_block_locations) {
    partial_locations.append(
        py::make_tuple(l.node_id, std::string(kvtier::TierName(l.tier)), l.pool_id));
  }
  py::dict out;
  out["matched_blocks"] = r.matched_blocks;
  out["locations"] = locations;
  out["partial_match_tokens"] =
      r.partial_match_tokens;  // with tail_tokens: of the block after the prefix
  out["partial_block_tokens"] = r.partial_block_tokens;
  out["partial_block_locations"] = partial_locations;
  out["scores"] = scores;
  out["sources"] = Client::SourcesOf(r);  // for onboard(..., sources=...)
  return out;
}

using Release = py::call_guard<py::gil_scoped_release>;

// What the coordinator knows of a prompt's blocks: lookup and route.
void BindLookups(py::class_<Client>& client) {
  client
      .def(
          "lookup",
          [](Client& c, const std::vector<PyKey>& keys, const py::object& tail_tokens) {
            const std::vector<uint32_t> tail = OptionalTokens(tail_tokens);
            LookupResult r;
            {
              py::gil_scoped_release unlocked;
              r = ValueOrThrow(c.Lookup(ToKeys(keys), tail));
            }
            return LookupToDict(r);
          },
          py::arg("keys"), py::arg("tail_tokens") = py::none())
      // (node id, prefix blocks, reusable tail tokens) of the worker to run the prompt on.
      .def(
          "route",
          [](Client& c, const std::vector<PyKey>& keys, const py::object& tail_tokens,
             const std::vector<std::string>& candidates) {
            const std::vector<uint32_t> tail = OptionalTokens(tail_tokens);
            RouteDecision d;
            {
              py::gil_scoped_release unlocked;
              d = ValueOrThrow(c.Route(ToKeys(keys), tail, candidates));
            }
            return py::make_tuple(d.node_id, d.prefix_blocks, d.partial_tokens);
          },
          py::arg("keys"), py::arg("tail_tokens") = py::none(),
          py::arg("candidates") = std::vector<std::string>{});
}

// A sequence's blocks in the node's pool: attach, allocate, extend, onboard, commit, free.
void BindSequences(py::class_<Client>& client) {
  client
      .def(
          "attach_pool",
          [](Client& c, uint32_t pool_id, const KvLayout& layout) {
            return ValueOrThrow(c.AttachPool(pool_id, layout));
          },
          py::arg("pool_id"), py::arg("layout"), Release())
      .def(
          "allocate",
          [](Client& c, uint64_t sequence, const std::vector<PyKey>& keys, uint32_t num_tokens,
             const py::object& tokens, uint32_t pool_id, uint64_t format_tag,
             uint32_t reserve_tokens, const std::vector<uint32_t>& pool_ids) {
            AllocateRequest request{.sequence = sequence,
                                    .pool_id = pool_id,
                                    .pool_ids = pool_ids,
                                    .keys = ToKeys(keys),
                                    .num_tokens = num_tokens,
                                    .tokens = OptionalTokens(tokens),
                                    .format_tag = format_tag,
                                    .reserve_tokens = reserve_tokens};
            py::gil_scoped_release unlocked;
            return ValueOrThrow(c.Allocate(request));
          },
          py::arg("sequence"), py::arg("keys"), py::arg("num_tokens"),
          py::arg("tokens") = py::none(), py::arg("pool_id") = 0, py::arg("format_tag") = 0,
          py::arg("reserve_tokens") = 0, py::arg("pool_ids") = std::vector<uint32_t>{})
      .def(
          "lookup_local",
          [](Client& c, const std::vector<PyKey>& keys, const std::vector<uint32_t>& pool_ids) {
            return ValueOrThrow(c.LookupLocal(pool_ids, ToKeys(keys)));
          },
          py::arg("keys"), py::arg("pool_ids") = std::vector<uint32_t>{0}, Release())
      .def(
          "extend",
          [](Client& c, uint64_t sequence, uint32_t num_tokens) {
            return ValueOrThrow(c.Extend(sequence, num_tokens));
          },
          py::arg("sequence"), py::arg("num_tokens"), Release())
      .def(
          "onboard",
          [](Client& c, uint64_t sequence, const std::vector<PyKey>& keys,
             const std::vector<std::string>& sources) {
            return ValueOrThrow(c.Onboard(sequence, ToKeys(keys), {}, sources));
          },
          py::arg("sequence"), py::arg("keys"), py::arg("sources") = std::vector<std::string>{},
          Release())
      .def(
          "commit",
          [](Client& c, uint64_t sequence, const std::vector<PyKey>& keys, uint8_t priority,
             std::optional<double> duration_s, const py::object& tokens,
             const std::vector<PyRange>& ranges, std::optional<uint8_t> decode_priority,
             std::optional<double> decode_duration_s) {
            // With the blocks' tokens the committed blocks become partial-reuse candidates.
            const std::vector<uint32_t> committed = OptionalTokens(tokens);
            const RetentionConfig retention =
                Retention(priority, duration_s, ranges, decode_priority, decode_duration_s);
            py::gil_scoped_release unlocked;
            return ValueOrThrow(c.Commit(sequence, ToKeys(keys), retention, committed));
          },
          py::arg("sequence"), py::arg("keys"), py::arg("priority") = kvtier::kDefaultPriority,
          py::arg("duration_s") = py::none(), py::arg("tokens") = py::none(),
          py::arg("ranges") = std::vector<PyRange>{}, py::arg("decode_priority") = py::none(),
          py::arg("decode_duration_s") = py::none())
      .def(
          "free", [](Client& c, uint64_t sequence) { OkOrThrow(c.Free(sequence)); },
          py::arg("sequence"), Release());
}

// SinkWindow: the slots of a StreamingLLM-style sequence's ring (common/sink_window.h), for
// a static sequence's block table (allocate with reserve_tokens = sinks + window).
void BindSinkWindow(py::module_& m) {
  py::class_<SinkWindowCache>(m, "SinkWindow")
      .def(py::init([](uint32_t sink_tokens, uint32_t window_tokens, uint32_t chunk_tokens,
                       uint32_t tokens_per_block, std::vector<uint32_t> block_table) {
             return ValueOrThrow(SinkWindowCache::Create({.sink_tokens = sink_tokens,
                                                          .window_tokens = window_tokens,
                                                          .chunk_tokens = chunk_tokens,
                                                          .tokens_per_block = tokens_per_block,
                                                          .block_table = std::move(block_table)}));
           }),
           py::arg("sink_tokens"), py::arg("window_tokens"), py::arg("chunk_tokens"),
           py::arg("tokens_per_block"), py::arg("block_table"))
      .def(
          "begin_chunk",
          [](SinkWindowCache& c, int64_t index) { return ValueOrThrow(c.BeginChunk(index)); },
          py::arg("chunk_index"), "Pool slots for the chunk's tokens (-1: not kept)")
      .def("visible_slots", &SinkWindowCache::VisibleSlots,
           "Slots attention reads, sinks first, then the window oldest to newest")
      .def(
          "visible_block_table",
          [](const SinkWindowCache& c) { return ValueOrThrow(c.VisibleBlockTable()); },
          "visible_slots as pool blocks in logical order, for a chunked attention over a block "
          "table (sinks, window and chunk in whole blocks)")
      .def(
          "end_chunk", [](SinkWindowCache& c, int64_t index) { OkOrThrow(c.EndChunk(index)); },
          py::arg("chunk_index"))
      .def_property_readonly("capacity_tokens", &SinkWindowCache::capacity_tokens)
      .def_property_readonly("steady_state", &SinkWindowCache::steady_state);
}

void BindClient(py::module_& m) {
  py::class_<Client> client(m, "Client");
  client
      .def(py::init([](const std::string& address, const std::string& token, double timeout_s,
                       const std::string& tls_ca_file, const std::string& tls_server_name,
                       const std::string& coordinator_address, const std::string& act_for) {
             py::gil_scoped_release unlocked;
             return ValueOrThrow(Client::Connect(
                 {.address = address,
                  .coordinator_address = coordinator_address,
                  .token = token,
                  .act_for = act_for,
                  .tls_ca_file = tls_ca_file,
                  .tls_server_name = tls_server_name,
                  .timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))}));
           }),
           py::arg("address"), py::arg("token") = "", py::arg("timeout_s") = 5.0,
           py::arg("tls_ca_file") = "", py::arg("tls_server_name") = "",
           py::arg("coordinator_address") = "", py::arg("act_for") = "")
      .def_property_readonly("tenant", &Client::tenant)
      .def(
          "for_tenant",
          [](Client& c, const std::string& tenant) {
            py::gil_scoped_release unlocked;
            return ValueOrThrow(c.ForTenant(tenant));
          },
          py::arg("tenant"),
          "a client over this one's connection acting for another tenant of the same engine "
          "token: each request's tenant is the view it is made through")
      .def("worker_stats", [](Client& c) {
        WorkerStats s;
        {
          py::gil_scoped_release unlocked;
          s = ValueOrThrow(c.GetWorkerStats());
        }
        py::dict out;
        out["total_blocks"] = s.total_blocks;
        out["used_blocks"] = s.used_blocks;
        out["cached_blocks"] = s.cached_blocks;
        out["offloaded_blocks"] = s.offloaded_blocks;
        out["onboarded_blocks"] = s.onboarded_blocks;
        out["cluster_counts"] = s.cluster_counts;  // False for a tenant: sizes only
        py::list layouts;                          // each pool's layout fingerprint, by pool id
        for (const KvLayout& layout : s.pool_layouts) layouts.append(layout.Fingerprint());
        out["pool_layouts"] = layouts;
        return out;
      });
  BindLookups(client);
  BindSequences(client);
}

}  // namespace

}  // namespace kvtier::client

using kvtier::client::Client;
using kvtier::client::StatusError;

PYBIND11_MODULE(kvtier, m) {
  m.doc() = "kvtier client SDK: reuse KV-cache blocks across requests, processes and nodes.";
  static py::exception<StatusError> error(m, "Error", PyExc_RuntimeError);
  // By value: pybind11's translator is a function pointer of that signature.
  py::register_exception_translator(
      [](std::exception_ptr thrown) {  // NOLINT(performance-unnecessary-value-param)
        try {
          if (thrown) std::rethrow_exception(thrown);
        } catch (const StatusError& e) {
          py::object args = py::make_tuple(std::string(kvtier::StatusCodeName(e.status.code())),
                                           e.status.message());
          PyErr_SetObject(error.ptr(), args.ptr());
        }
      });
  kvtier::client::BindKeys(m);
  kvtier::client::BindTypes(m);
  kvtier::client::BindClient(m);
  kvtier::client::BindSinkWindow(m);
}
