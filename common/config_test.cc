#include "common/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace kvtier {
namespace {

Result<KvtierConfig> FromYaml(std::string_view yaml) {
  KvtierConfig config;
  KVTIER_RETURN_IF_ERROR(ApplyYaml(yaml, "kvtier.yaml", config));
  KVTIER_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

void ExpectError(const Status& status, std::initializer_list<std::string_view> parts) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status;
  for (std::string_view part : parts) {
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "missing \"" << part << "\" in: " << status;
  }
}

TEST(ConfigTest, DefaultsAreValid) {
  Result<KvtierConfig> config = LoadConfig({});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics.port, 9400);
  EXPECT_TRUE(config->auth.enabled);
  EXPECT_EQ(config->coordinator.listen, std::vector<std::string>{"127.0.0.1:7400"});
}

TEST(ConfigTest, YamlSetsNestedFieldsAndLists) {
  Result<KvtierConfig> config = FromYaml(R"(
data_dir: /var/lib/kvtier
log: {level: debug}
metrics:
  port: 9500
coordinator:
  listen: ["0.0.0.0:7400", "unix:/run/kvtier.sock"]
  max_message_bytes: 1048576
)");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->data_dir, "/var/lib/kvtier");
  EXPECT_EQ(config->log.level, "debug");
  EXPECT_EQ(config->metrics.port, 9500);
  EXPECT_EQ(config->coordinator.listen.size(), 2u);
  EXPECT_EQ(config->coordinator.max_message_bytes, 1048576u);
}

TEST(ConfigTest, InvalidYamlNamesLineAndColumn) {
  ExpectError(FromYaml("metrics:\n  port: [1, 2\n").status(),
              {"kvtier.yaml", "invalid YAML at line"});
}

TEST(ConfigTest, UnknownFieldIsNamedWithKnownAlternatives) {
  ExpectError(FromYaml("metrics:\n  prot: 9400\n").status(),
              {"unknown field \"metrics.prot\"", "line 2", "bind, port"});
  ExpectError(FromYaml("colour: blue\n").status(), {"unknown field \"colour\"", "top-level"});
}

TEST(ConfigTest, OutOfRangeNamesFieldAndRange) {
  ExpectError(FromYaml("metrics: {port: 70000}\n").status(),
              {"metrics.port", "70000", "[0, 65535]"});
  ExpectError(FromYaml("metrics: {port: -1}\n").status(), {"metrics.port", "[0, 65535]"});
  ExpectError(FromYaml("metrics: {port: 12ab}\n").status(), {"metrics.port", "not a whole number"});
  ExpectError(FromYaml("coordinator: {max_message_bytes: 10}\n").status(),
              {"coordinator.max_message_bytes", "[4096, 1073741824]"});
  ExpectError(FromYaml("log: {level: loud}\n").status(),
              {"log.level", "trace, debug, info, warn, error, off"});
  ExpectError(FromYaml("coordinator: {lease_ttl_ms: 10}\n").status(),
              {"coordinator.lease_ttl_ms", "[500, 3600000]"});
  ExpectError(FromYaml("coordinator: {max_index_blocks: 134217728}\n").status(),
              {"coordinator.max_index_blocks", "[1024, 134217727]"});
  ExpectError(FromYaml("auth: {enabled: yes please}\n").status(), {"auth.enabled", "true, false"});
  ExpectError(FromYaml("coordinator: {listen: [\"nohost\"]}\n").status(),
              {"coordinator.listen", "nohost"});
  ExpectError(FromYaml("metrics: 5\n").status(),
              {"metrics", "expects a section with keys: bind, port"});
  ExpectError(FromYaml("metrics: {port: [1]}\n").status(), {"metrics.port", "single value"});
  ExpectError(FromYaml("coordinator: {overlap_weight: -1}\n").status(),
              {"coordinator.overlap_weight", "[0, 1000]"});
  ExpectError(FromYaml("coordinator: {overlap_weight: heavy}\n").status(),
              {"coordinator.overlap_weight", "not a number"});
}

TEST(ConfigTest, PerLayerWindowsComeFromYamlOrEnvironmentAndBadOnesAreNamed) {
  Result<KvtierConfig> yaml =
      FromYaml("worker: {max_attention_window: [1024, 32768], sink_tokens: 4}\n");
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_EQ(yaml->worker.max_attention_window, (std::vector<uint32_t>{1024, 32768}));
  EXPECT_EQ(yaml->worker.sink_tokens, 4u);
  ConfigSources sources;
  sources.environment = {{"KVTIER_WORKER_MAX_ATTENTION_WINDOW", "512,4096,4096"}};
  Result<KvtierConfig> env = LoadConfig(sources);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->worker.max_attention_window, (std::vector<uint32_t>{512, 4096, 4096}));
  ExpectError(FromYaml("worker: {max_attention_window: [1024, wide]}\n").status(),
              {"worker.max_attention_window", "\"wide\" is not a whole number"});
  ExpectError(FromYaml("worker: {max_attention_window: [-1]}\n").status(),
              {"worker.max_attention_window", "[0, 16777216]"});
}

TEST(ConfigTest, TheOverlapWeightComesFromYamlEnvironmentOrFlags) {
  Result<KvtierConfig> yaml = FromYaml("coordinator: {overlap_weight: 2.5}\n");
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_DOUBLE_EQ(yaml->coordinator.overlap_weight, 2.5);
  ConfigSources sources;
  sources.environment = {{"KVTIER_COORDINATOR_OVERLAP_WEIGHT", "16"}};
  Result<KvtierConfig> env = LoadConfig(sources);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_DOUBLE_EQ(env->coordinator.overlap_weight, 16);
  sources.flags = {{"coordinator.overlap_weight", "0"}};
  Result<KvtierConfig> flag = LoadConfig(sources);
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_DOUBLE_EQ(flag->coordinator.overlap_weight, 0);
}

TEST(ConfigTest, CrossFieldChecks) {
  ExpectError(FromYaml("tls: {cert_file: /c.pem}\n").status(), {"tls.cert_file", "tls.key_file"});
}

// The worker's queues must hold a block of its layout: the default layout's blocks are
// 4 layers x K,V x 2 heads x 64 dims x 16 tokens x 2 bytes = 32768 bytes.
TEST(ConfigTest, AWorkersQueuesHoldAtLeastOneBlock) {
  ExpectError(FromYaml("worker: {offload_staging_bytes: 32767}\n").status(),
              {"worker.offload_staging_bytes", "32767 bytes hold no block", "32768 bytes a block",
               "at least 32768, or 0 to turn the staging off"});
  EXPECT_TRUE(FromYaml("worker: {offload_staging_bytes: 32768}\n").ok());
  EXPECT_TRUE(FromYaml("worker: {offload_staging_bytes: 0}\n").ok()) << "off";
  // Blocks of 64 layers x 2 x 8 heads x 128 dims x 16 tokens x fp16: 4 MiB, beyond the
  // write-through queue's 1 MiB, which matters only with write-through stores.
  const std::string big =
      "worker: {num_layers: 64, num_kv_heads: 8, head_dim: 128, write_through_queue_bytes: 1048576";
  EXPECT_TRUE(FromYaml(big + "}\n").ok());
  ExpectError(
      FromYaml(big + ", write_through_stores: [s/store]}\n").status(),
      {"worker.write_through_queue_bytes", "1048576 bytes hold no block", "4194304 bytes a block"});
  // A layout the library refuses (24 tokens: not a power of two) is the worker node's to
  // name, not this check's.
  EXPECT_TRUE(FromYaml("worker: {tokens_per_block: 24, offload_staging_bytes: 1}\n").ok());
}

TEST(ConfigTest, PrecedenceIsDefaultsYamlEnvironmentFlags) {
  char path[] = "/tmp/kvtier_config_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string yaml =
      "metrics: {port: 1000, bind: 127.0.0.1}\nlog: {level: warn}\ndata_dir: /from/yaml\n";
  ASSERT_EQ(write(fd, yaml.data(), yaml.size()), static_cast<ssize_t>(yaml.size()));
  close(fd);

  ConfigSources sources;
  sources.yaml_path = path;
  sources.environment = {{"KVTIER_METRICS_PORT", "2000"},
                         {"KVTIER_LOG_LEVEL", "error"},
                         {"KVTIER_SERVICE_HOST", "10.0.0.1"},  // Kubernetes service link: ignored
                         {"HOME", "/root"}};
  sources.flags = {{"metrics.port", "3000"}, {"coordinator.listen", "127.0.0.1:1, 127.0.0.1:2"}};
  Result<KvtierConfig> config = LoadConfig(sources);
  unlink(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics.port, 3000);         // flag over environment over YAML
  EXPECT_EQ(config->log.level, "error");         // environment over YAML
  EXPECT_EQ(config->metrics.bind, "127.0.0.1");  // YAML over default
  EXPECT_EQ(config->data_dir, "/from/yaml");
  EXPECT_EQ(config->coordinator.listen, (std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:2"}));
}

TEST(ConfigTest, ErrorsNameTheirSource) {
  ConfigSources env_source;
  env_source.environment = {{"KVTIER_METRICS_PORT", "99999"}};
  ExpectError(LoadConfig(env_source).status(),
              {"environment KVTIER_METRICS_PORT", "metrics.port", "99999"});

  ConfigSources flag_source;
  flag_source.flags = {{"data_dir", ""}};
  ExpectError(LoadConfig(flag_source).status(),
              {"flag --data-dir", "data_dir", "must not be empty"});

  ConfigSources missing_file;
  missing_file.yaml_path = "/nonexistent/kvtier.yaml";
  ExpectError(LoadConfig(missing_file).status(), {"/nonexistent/kvtier.yaml", "cannot be read"});
}

TEST(ConfigTest, FieldListIsComplete) {
  const std::vector<ConfigFieldInfo> fields = ListConfigFields();
  ASSERT_FALSE(fields.empty());
  bool found = false;
  for (const ConfigFieldInfo& f : fields) {
    EXPECT_FALSE(f.help.empty()) << f.path;
    if (f.path == "metrics.port") {
      found = true;
      EXPECT_EQ(f.env_var, "KVTIER_METRICS_PORT");
      EXPECT_EQ(f.flag, "--metrics-port");
      EXPECT_EQ(f.default_value, "9400");
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace kvtier
