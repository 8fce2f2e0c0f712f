// StartNodeDataStream: a node's configuration section decides whether its data stream
// runs, how many threads serve it, and whether it is TLS.
#include "services/store/rpc/node_data_stream.h"

#include <gtest/gtest.h>

#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

class NodeDataStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ =
        storage::TieredStore::Create(storage::testing::HostOverDisk(1u << 20, dir_.path())).value();
    config_.store.listen = "127.0.0.1:0";
  }
  Result<std::unique_ptr<DataStreamServer>> Start() {
    return StartNodeDataStream(
        NodeDataStreamOptionsFrom(config_.store, config_, store_.get(), nullptr));
  }

  kvtier::testing::TempDir dir_;
  std::unique_ptr<storage::TieredStore> store_;
  KvtierConfig config_;
};

TEST_F(NodeDataStreamTest, TheSectionsThreadCountsReachTheStream) {
  config_.store.data_stream_threads = 3;
  config_.store.data_stream_tier_threads = 5;
  auto stream = Start();
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_NE(*stream, nullptr);
  EXPECT_EQ((*stream)->Stats().loops, 3u);
  EXPECT_EQ((*stream)->Stats().tier_threads, 5u);
}

// Node sessions' gets lend the host tier's pages by default (where it can), and not when
// the section says false.
TEST_F(NodeDataStreamTest, TheSectionSaysWhetherGetsLendPages) {
  auto lending = Start();
  ASSERT_TRUE(lending.ok()) << lending.status();
  EXPECT_EQ((*lending)->Stats().lends_pages, store_->host_pages().can_lend());
  lending->reset();
  config_.store.data_stream_lend_pages = false;
  auto copying = Start();
  ASSERT_TRUE(copying.ok()) << copying.status();
  EXPECT_FALSE((*copying)->Stats().lends_pages);
}

TEST_F(NodeDataStreamTest, ByDefaultTheDiskWorkHasAThreadPerLoop) {
  config_.store.data_stream_threads = 2;
  auto stream = Start();
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ((*stream)->Stats().tier_threads, 2u);
}

TEST_F(NodeDataStreamTest, NoStreamWhenOffOrOnAUnixSocket) {
  config_.store.data_stream = false;
  EXPECT_EQ(Start().value(), nullptr) << "turned off";
  config_.store.data_stream = true;
  config_.store.listen = "unix:/run/kvtier.sock";
  EXPECT_EQ(Start().value(), nullptr) << "a unix socket";
}

// With TLS configured the stream runs TLS with the node's certificate, and does not lend.
TEST_F(NodeDataStreamTest, WithTlsTheStreamIsEncryptedWithTheNodesCertificate) {
  kvtier::testing::TempDir certs;
  ASSERT_EQ(kvtier::testing::MakeTestCertificates(certs.path()), "");
  config_.tls.cert_file = certs.File("server.pem");
  config_.tls.key_file = certs.File("server.key");
  auto stream = Start();
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_NE(*stream, nullptr);
  EXPECT_TRUE((*stream)->Stats().encrypted);
  EXPECT_FALSE((*stream)->Stats().lends_pages);
  // A key that is not the certificate's is refused by name.
  config_.tls.key_file = certs.File("stranger.key");
  stream->reset();
  auto mismatched = Start();
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatched.status().message().find("do not make a usable keypair"), std::string::npos)
      << mismatched.status();
}

}  // namespace
}  // namespace kvtier::store
