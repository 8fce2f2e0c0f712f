#include "services/rpc/schema_convert.h"

namespace kvtier::rpc {

std::vector<BlockKey> ToKeys(capnp::List<schema::BlockKey>::Reader list) {
  std::vector<BlockKey> keys;
  keys.reserve(list.size());
  for (auto k : list) keys.push_back(ToKey(k));
  return keys;
}

std::vector<uint32_t> ToTokens(capnp::List<uint32_t>::Reader list) {
  std::vector<uint32_t> tokens;
  tokens.reserve(list.size());
  for (const uint32_t t : list) tokens.push_back(t);
  return tokens;
}

void FromTokens(std::span<const uint32_t> tokens, capnp::List<uint32_t>::Builder out) {
  for (unsigned i = 0; i < tokens.size(); ++i) out.set(i, tokens[i]);
}

Result<KvLayout> ToLayout(schema::KvLayout::Reader l) {
  const auto dtype = static_cast<uint16_t>(l.getDtype());
  if (dtype > static_cast<uint16_t>(KvDtype::kInt4)) {
    return InvalidArgumentError("kv layout field dtype has an unknown value " +
                                std::to_string(dtype));
  }
  return KvLayout::Create({.num_layers = l.getNumLayers(),
                           .num_kv_heads = l.getNumKvHeads(),
                           .head_dim = l.getHeadDim(),
                           .tokens_per_block = l.getTokensPerBlock(),
                           .dtype = static_cast<KvDtype>(dtype),
                           .attention_window = l.getAttentionWindow(),
                           .sink_tokens = l.getSinkTokens()});
}

void FromLayout(const KvLayout& layout, schema::KvLayout::Builder b) {
  b.setNumLayers(layout.num_layers());
  b.setNumKvHeads(layout.num_kv_heads());
  b.setHeadDim(layout.head_dim());
  b.setTokensPerBlock(layout.tokens_per_block());
  b.setDtype(static_cast<schema::Dtype>(layout.dtype()));
  b.setAttentionWindow(layout.attention_window());
  b.setSinkTokens(layout.sink_tokens());
}

}  // namespace kvtier::rpc
