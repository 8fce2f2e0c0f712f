// LoopBoundBlockSource: a source read on its KJ loop's thread from other threads, and
// answering kUnavailable once that loop has exited.
#include "services/store/rpc/loop_bound_block_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "common/mutex.h"
#include "storage/testing/blocks.h"

namespace kvtier::store {
namespace {

using storage::testing::MakeBlock;
using storage::testing::TestBlock;

// Has block 1, which HoldBatch holds (hold 7); records the thread of every call and counts
// each kind of call.
class RecordingSource final : public ExtraBlockSource {
 public:
  explicit RecordingSource(TestBlock block) : block_(std::move(block)) {}
  Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) override {
    Record(peeks);
    if (ref.key != block_.header.key) return NotFoundError("not held");
    return block_.header;
  }
  Result<storage::BlockHeader> Read(const storage::BlockRef& ref, std::span<uint8_t> out) override {
    Record(reads);
    if (ref.key != block_.header.key) return NotFoundError("not held");
    std::copy(block_.payload.begin(), block_.payload.end(), out.begin());
    return block_.header;
  }
  std::vector<Result<HeldBlock>> HoldBatch(std::span<const storage::BlockRef> refs) override {
    Record(hold_batches);
    std::vector<Result<HeldBlock>> found = ExtraBlockSource::HoldBatch(refs);
    for (Result<HeldBlock>& each : found) {
      if (each.ok()) *each = HeldBlock{.header = each->header, .held = block_.payload, .hold = 7};
    }
    return found;
  }
  Status ReleaseBatch(std::span<const uint64_t> holds,
                      std::span<const uint64_t> /*checksums*/) override {
    Record(release_batches);
    released.insert(released.end(), holds.begin(), holds.end());
    return Status::Ok();
  }
  std::vector<Result<storage::BlockHeader>> ReadBatch(
      std::span<const storage::BlockRef> refs, std::span<const std::span<uint8_t>> outs) override {
    Record(read_batches);
    return ExtraBlockSource::ReadBatch(refs, outs);
  }
  // Any thread's: records its own.
  Status CopyHeld(std::span<const uint64_t> holds,
                  std::span<const std::span<uint8_t>> outs) override {
    copy_thread = std::this_thread::get_id();
    for (size_t i = 0; i < holds.size(); ++i)
      std::copy(block_.payload.begin(), block_.payload.end(), outs[i].begin());
    return Status::Ok();
  }

  // Likewise: the block's payload, staged where it is.
  Result<std::unique_ptr<StagedBlocks>> StageHeld(std::span<const uint64_t> holds) override {
    stage_thread = std::this_thread::get_id();
    return std::unique_ptr<StagedBlocks>(new InPlace(block_.payload, holds.size()));
  }

  // Written on the loop's thread only; read by the test once its calls have returned.
  int peeks = 0, reads = 0, hold_batches = 0, release_batches = 0, read_batches = 0;
  std::vector<uint64_t> released;
  std::vector<std::thread::id> threads;
  std::thread::id copy_thread;   // CopyHeld's last caller
  std::thread::id stage_thread;  // StageHeld's

 private:
  // `count` views of one payload.
  class InPlace final : public StagedBlocks {
   public:
    InPlace(std::span<const uint8_t> payload, size_t count) : views_(count, payload) {}
    std::span<const std::span<const uint8_t>> views() const override { return views_; }

   private:
    std::vector<std::span<const uint8_t>> views_;
  };

  void Record(int& calls) {
    ++calls;
    threads.push_back(std::this_thread::get_id());
  }
  const TestBlock block_;
};

// A thread running a KJ event loop that binds the source to itself, and runs until Stop().
class LoopThread {
 public:
  explicit LoopThread(ExtraBlockSource* source) {
    thread_ = std::thread([this, source] {
      kj::EventLoop loop;
      kj::WaitScope wait(loop);
      auto stop = kj::newPromiseAndCrossThreadFulfiller<void>();
      {
        MutexLock lock(mu_);
        bound_ = LoopBoundBlockSource::Create(source);
        stop_ = kj::mv(stop.fulfiller);
        id_ = std::this_thread::get_id();
      }
      ready_.NotifyAll();
      stop.promise.wait(wait);
    });
    MutexLock lock(mu_);
    ready_.Wait(lock, [&]() KVTIER_REQUIRES(mu_) { return stop_.get() != nullptr; });
  }
  ~LoopThread() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    {
      MutexLock lock(mu_);
      stop_->fulfill();
    }
    thread_.join();
  }
  Result<std::shared_ptr<LoopBoundBlockSource>> bound() {
    MutexLock lock(mu_);
    return bound_;
  }
  std::thread::id id() {
    MutexLock lock(mu_);
    return id_;
  }

 private:
  Mutex mu_;
  CondVar ready_;
  Result<std::shared_ptr<LoopBoundBlockSource>> bound_ KVTIER_GUARDED_BY(mu_) =
      InternalError("not bound yet");
  kj::Own<const kj::CrossThreadPromiseFulfiller<void>> stop_ KVTIER_GUARDED_BY(mu_);
  std::thread::id id_ KVTIER_GUARDED_BY(mu_);
  std::thread thread_;
};

const storage::BlockRef kRef1{MakeBlock(1, 1).header.key, storage::testing::kFormat,
                              storage::testing::kScope};
const storage::BlockRef kRef2{MakeBlock(2, 1).header.key, storage::testing::kFormat,
                              storage::testing::kScope};

// Block 1 held, block 2 not: every call from the test's thread runs on the loop's thread,
// a batch as one call there, and answers what the source answered.
TEST(LoopBoundBlockSourceTest, EachCallRunsOnTheLoopsThreadAndAnswersAsTheSource) {
  const TestBlock block = MakeBlock(1, 100);
  RecordingSource source(block);
  LoopThread loop(&source);
  ASSERT_TRUE(loop.bound().ok()) << loop.bound().status();
  ExtraBlockSource& bound = **loop.bound();

  EXPECT_EQ(bound.Peek(kRef1)->payload_bytes, 100u);
  EXPECT_EQ(bound.Peek(kRef2).status().code(), StatusCode::kNotFound);
  std::vector<uint8_t> out(100);
  ASSERT_TRUE(bound.Read(kRef1, out).ok());
  EXPECT_EQ(out, block.payload);
  const storage::BlockRef refs[] = {kRef1, kRef2};
  const std::vector<Result<HeldBlock>> found = bound.HoldBatch(refs);
  ASSERT_EQ(found.size(), 2u);
  ASSERT_TRUE(found[0].ok()) << found[0].status();
  EXPECT_EQ(found[0]->header.checksum, block.header.checksum);
  EXPECT_TRUE(std::ranges::equal(found[0]->held, block.payload))
      << "block 1's bytes, held in place";
  EXPECT_EQ(found[1].status().code(), StatusCode::kNotFound);
  const uint64_t holds[] = {found[0]->hold};
  EXPECT_TRUE(bound.ReleaseBatch(holds, {}).ok());
  EXPECT_EQ(source.released, std::vector<uint64_t>{7});
  std::vector<uint8_t> batch_out(100, 0);
  const std::span<uint8_t> outs[] = {batch_out};
  const std::vector<Result<storage::BlockHeader>> read = bound.ReadBatch(std::span(refs, 1), outs);
  ASSERT_TRUE(read.at(0).ok()) << read.at(0).status();
  EXPECT_EQ(batch_out, block.payload);

  // Calls counted: a batch is one call of the source's batch method (its Peeks and Reads
  // within it run there too).
  EXPECT_EQ(source.hold_batches, 1);
  EXPECT_EQ(source.release_batches, 1);
  EXPECT_EQ(source.read_batches, 1);
  EXPECT_EQ(source.peeks, 2 + 2);
  EXPECT_EQ(source.reads, 1 + 1);
  for (const std::thread::id& id : source.threads) EXPECT_EQ(id, loop.id());
  EXPECT_NE(loop.id(), std::this_thread::get_id());
}

// CopyHeld and StageHeld are the calls that do not hop: the source copies or stages held
// blocks on the caller's thread while its loop goes on, even once the loop has exited.
TEST(LoopBoundBlockSourceTest, CopyHeldAndStageHeldRunOnTheCallersThread) {
  const TestBlock block = MakeBlock(1, 100);
  RecordingSource source(block);
  LoopThread loop(&source);
  ASSERT_TRUE(loop.bound().ok()) << loop.bound().status();
  const std::shared_ptr<LoopBoundBlockSource> bound = *loop.bound();
  const uint64_t holds[] = {7};
  std::vector<uint8_t> out(100);
  const std::span<uint8_t> outs[] = {out};
  ASSERT_TRUE(bound->CopyHeld(holds, outs).ok());
  EXPECT_EQ(out, block.payload);
  EXPECT_EQ(source.copy_thread, std::this_thread::get_id());
  Result<std::unique_ptr<StagedBlocks>> staged = bound->StageHeld(holds);
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_EQ((*staged)->views().size(), 1u);
  EXPECT_TRUE(std::ranges::equal((*staged)->views()[0], block.payload));
  EXPECT_EQ(source.stage_thread, std::this_thread::get_id());
  EXPECT_TRUE(source.threads.empty()) << "nothing ran on the loop";
  loop.Stop();
  std::fill(out.begin(), out.end(), 0);
  EXPECT_TRUE(bound->CopyHeld(holds, outs).ok()) << "the source outlives the loop";
  EXPECT_EQ(out, block.payload);
}

// Once the loop's thread has exited, the source is never called again: each call, and
// each block of a batch, answers kUnavailable naming the loop.
TEST(LoopBoundBlockSourceTest, OnceTheLoopHasExitedEveryCallAnswersUnavailable) {
  RecordingSource source(MakeBlock(1, 100));
  LoopThread loop(&source);
  ASSERT_TRUE(loop.bound().ok()) << loop.bound().status();
  const std::shared_ptr<LoopBoundBlockSource> bound = *loop.bound();
  loop.Stop();

  const Status peeked = bound->Peek(kRef1).status();
  EXPECT_EQ(peeked.code(), StatusCode::kUnavailable) << peeked;
  EXPECT_NE(peeked.message().find("event loop"), std::string::npos) << peeked;
  std::vector<uint8_t> out(100);
  EXPECT_EQ(bound->Read(kRef1, out).status().code(), StatusCode::kUnavailable);
  const storage::BlockRef refs[] = {kRef1, kRef2};
  for (const Result<HeldBlock>& each : bound->HoldBatch(refs)) {
    EXPECT_EQ(each.status().code(), StatusCode::kUnavailable);
  }
  const uint64_t holds[] = {7};
  EXPECT_EQ(bound->ReleaseBatch(holds, {}).code(), StatusCode::kUnavailable);
  const std::span<uint8_t> outs[] = {out, out};
  const std::vector<Result<storage::BlockHeader>> read = bound->ReadBatch(refs, outs);
  ASSERT_EQ(read.size(), 2u);
  for (const Result<storage::BlockHeader>& each : read)
    EXPECT_EQ(each.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(source.threads.empty()) << "the source was not called";
}

TEST(LoopBoundBlockSourceTest, ItIsBoundOnlyOnALoopsThreadAndToASource) {
  RecordingSource source(MakeBlock(1, 100));
  const Status off_loop =
      LoopBoundBlockSource::Create(&source).status();  // the test's thread runs no loop
  EXPECT_EQ(off_loop.code(), StatusCode::kFailedPrecondition) << off_loop;
  LoopThread loop(nullptr);
  EXPECT_EQ(loop.bound().status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::store
