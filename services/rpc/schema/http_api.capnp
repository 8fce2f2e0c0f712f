# kvtier's HTTP/JSON routing API for gateways (POST /v1/lookup, /v1/route on the
# coordinator), as JSON objects, field names as the $Json.name annotations give them. The
# answers are encoded with capnp's JSON codec; the request body (PromptQuery) is read and
# written by services/coordinator/rpc/prompt_query_json.h, which must keep to the shape
# declared here. Evolution rules: see common.capnp.
@0xf1284bd5e0fb8c8b;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kvtier::rpc::schema");
using Json = import "/capnp/compat/json.capnp";

# The body of both calls.
struct PromptQuery {
  tokens @0 :List(UInt32);
  cacheSalt @1 :Text $Json.name("cache_salt");
  loraName @2 :Text $Json.name("lora_name");
  model @3 :Text;
  loraId @4 :UInt64 $Json.name("lora_id");
  candidates @5 :List(Text);  # /v1/route: the instances it may choose among; absent: any
  # /v1/route: the caller's load of each candidate in active blocks (in the candidates'
  # order), in place of what the coordinator knows (engines report none).
  candidateActiveBlocks @6 :List(UInt32) $Json.name("candidate_active_blocks");
}

struct TierTokens {
  gpu @0 :UInt32;
  host @1 :UInt32;
  disk @2 :UInt32;
}

struct InstancePrefix {
  name @0 :Text;
  prefixTokens @1 :UInt32 $Json.name("prefix_tokens");
  # The longest prefix held in each tier or a faster one: gpu <= host <= disk.
  prefixTokensByTier @2 :TierTokens $Json.name("prefix_tokens_by_tier");
}

struct LookupAnswer {
  instances @0 :List(InstancePrefix);
}

struct CandidateScore {
  name @0 :Text;
  prefixTokens @1 :UInt32 $Json.name("prefix_tokens");
  activeBlocks @2 :UInt32 $Json.name("active_blocks");
  cost @3 :Float64;  # overlap_weight * blocks to prefill + active blocks: the lowest wins
}

struct RouteAnswer {
  instance @0 :Text;
  prefixTokens @1 :UInt32 $Json.name("prefix_tokens");
  candidates @2 :List(CandidateScore);
}

struct ErrorAnswer {
  error @0 :Text;
  code @1 :Text;  # the canonical status code, e.g. "INVALID_ARGUMENT"
}
