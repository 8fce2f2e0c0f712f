#include "services/cli/route_command.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "common/file.h"
#include "services/auth/token_store.h"
#include "services/coordinator/rpc/routing_client.h"

namespace kvtier::cli {
namespace {

constexpr int kExitUsage = 2;

bool IsSeparator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

Result<std::vector<uint32_t>> ParseTokensFile(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "tokens file"));
  const size_t open = text.find_first_not_of(" \t\r\n");
  const size_t close = text.find_last_not_of(" \t\r\n");
  if (open != std::string::npos && text[open] == '[') {
    if (text[close] != ']')
      return InvalidArgumentError("tokens file " + path + ": '[' without ']'");
    text = text.substr(open + 1, close - open - 1);
  }
  std::vector<uint32_t> tokens;
  for (size_t at = 0; at < text.size();) {
    if (IsSeparator(text[at])) {
      ++at;
      continue;
    }
    size_t end = at;
    while (end < text.size() && !IsSeparator(text[end])) ++end;
    const std::string entry = text.substr(at, end - at);
    char* parsed_to = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(entry.c_str(), &parsed_to, 10);
    if (entry[0] == '-' || *parsed_to != '\0' || errno == ERANGE || value > UINT32_MAX) {
      return InvalidArgumentError("tokens file " + path + ": entry " +
                                  std::to_string(tokens.size() + 1) + " (\"" + entry +
                                  "\") is not a token id (0 to 4294967295)");
    }
    tokens.push_back(static_cast<uint32_t>(value));
    at = end;
  }
  if (tokens.empty()) return InvalidArgumentError("tokens file " + path + ": no token ids in it");
  return tokens;
}

RouteCommand::RouteCommand(CLI::App& app)
    : route_(app.add_subcommand(
          "route",
          "Ask the coordinator's routing API where a prompt goes (POST /v1/route; /v1/lookup "
          "with --lookup): its token ids from --tokens-file, the answer's JSON on stdout. A "
          "route counts as load on the engine it names (coordinator.routed_load_half_life_ms); "
          "a lookup changes nothing.")) {
  route_->add_option("--http", http_, "The routing API: http://host:port (https:// with TLS)")
      ->required();
  route_
      ->add_option("--tokens-file", tokens_file_,
                   "The prompt's token ids: integers separated by spaces or commas, or a "
                   "JSON array")
      ->type_name("FILE")
      ->required();
  route_->add_option("--token", token_, "Tenant token")->envname("KVTIER_TOKEN");
  route_->add_option("--token-file", token_file_, "File whose first line is the token")
      ->type_name("FILE");
  route_->add_option("--act-for", act_for_,
                     "The tenant an engine or node token acts for (X-Kvtier-Act-For)");
  route_->add_option("--cache-salt", cache_salt_, "The prompt's cache salt (vLLM's cache_salt)");
  route_->add_option("--lora-name", lora_name_, "The LoRA adapter the prompt runs under");
  route_->add_option("--model", model_, "Only the key space of engines serving this model");
  route_->add_option("--candidates", candidates_, "Route among these instances only")
      ->delimiter(',');
  route_->add_flag("--lookup", lookup_, "Every instance's prefix (POST /v1/lookup) instead");
  route_->add_option("--tls-ca-file", tls_ca_file_, "For https: trust this CA bundle")
      ->type_name("FILE");
  route_->add_option("--tls-server-name", tls_server_name_,
                     "Name the certificate must carry (default: the URL's host)");
}

int RouteCommand::Run() const {
  Result<std::vector<uint32_t>> tokens = ParseTokensFile(tokens_file_);
  if (!tokens.ok()) {
    std::fprintf(stderr, "kvtier route: %s\n", tokens.status().message().c_str());
    return kExitUsage;
  }
  Result<std::string> token = auth::TokenFromFlags(token_, token_file_);
  if (!token.ok()) {
    std::fprintf(stderr, "kvtier route: %s\n", token.status().message().c_str());
    return kExitUsage;
  }
  const coordinator::RoutingClientOptions options{.url = http_,
                                                  .token = *token,
                                                  .act_for = act_for_,
                                                  .tls_ca_file = tls_ca_file_,
                                                  .tls_server_name = tls_server_name_};
  const coordinator::RoutingQuery query{.tokens = std::move(*tokens),
                                        .cache_salt = cache_salt_,
                                        .lora_name = lora_name_,
                                        .model = model_,
                                        .candidates = candidates_};
  Result<std::string> answer = coordinator::CallRoutingApi(
      options, lookup_ ? coordinator::RoutingCall::kLookup : coordinator::RoutingCall::kRoute,
      query);
  if (!answer.ok()) {
    std::fprintf(stderr, "kvtier route: %s\n", answer.status().ToString().c_str());
    return answer.status().code() == StatusCode::kInvalidArgument ? kExitUsage : 1;
  }
  std::printf("%s\n", answer->c_str());
  return 0;
}

}  // namespace kvtier::cli
