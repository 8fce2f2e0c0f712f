#include "services/store/rpc/loop_bound_block_source.h"

#include <optional>
#include <string>
#include <type_traits>

#include <kj/exception.h>

#include "services/rpc/status_mapping.h"

namespace kvtier::store {
namespace {

// Each block of a batch answers the call's failure.
template <typename T = storage::BlockHeader>
std::vector<Result<T>> EachFails(size_t count, const Status& status) {
  return std::vector<Result<T>>(count, status);
}

}  // namespace

Result<std::shared_ptr<LoopBoundBlockSource>> LoopBoundBlockSource::Create(
    ExtraBlockSource* source) {
  if (source == nullptr) return InvalidArgumentError("a loop-bound block source needs a source");
  kj::Maybe<kj::Own<const kj::Executor>> loop;
  // getCurrentThreadExecutor() throws where the thread runs no event loop.
  KJ_IF_MAYBE (exception,
               kj::runCatchingExceptions([&] { loop = kj::getCurrentThreadExecutor().addRef(); })) {
    return FailedPreconditionError(
        "a loop-bound block source must be created on its loop's thread: " +
        std::string(exception->getDescription().cStr()));
  }
  KJ_IF_MAYBE (bound, loop) {
    return std::make_shared<LoopBoundBlockSource>(source, kj::mv(*bound));
  }
  return InternalError("no executor for this thread's event loop");
}

template <typename Call>
Result<std::invoke_result_t<Call>> LoopBoundBlockSource::OnLoop(Call call) const {
  std::optional<std::invoke_result_t<Call>> result;
  // The source's calls return Status, never throw: an exception here is the loop's
  // (DISCONNECTED: it has exited, before or while this call waited).
  KJ_IF_MAYBE (exception,
               kj::runCatchingExceptions([&] { result.emplace(loop_->executeSync(call)); })) {
    return rpc::ExceptionToStatus(*exception).WithContext("the event loop serving the blocks");
  }
  return std::move(*result);
}

Result<storage::BlockHeader> LoopBoundBlockSource::Peek(const storage::BlockRef& ref) {
  Result<Result<storage::BlockHeader>> peeked = OnLoop([&] { return source_->Peek(ref); });
  if (!peeked.ok()) return peeked.status();
  return std::move(*peeked);
}

Result<storage::BlockHeader> LoopBoundBlockSource::Read(const storage::BlockRef& ref,
                                                        std::span<uint8_t> out) {
  Result<Result<storage::BlockHeader>> read = OnLoop([&] { return source_->Read(ref, out); });
  if (!read.ok()) return read.status();
  return std::move(*read);
}

std::vector<Result<HeldBlock>> LoopBoundBlockSource::HoldBatch(
    std::span<const storage::BlockRef> refs) {
  Result<std::vector<Result<HeldBlock>>> found = OnLoop([&] { return source_->HoldBatch(refs); });
  if (!found.ok()) return EachFails<HeldBlock>(refs.size(), found.status());
  return std::move(*found);
}

Status LoopBoundBlockSource::ReleaseBatch(std::span<const uint64_t> holds,
                                          std::span<const uint64_t> checksums) {
  Status released = Status::Ok();  // the source's answer, where the loop ran the call
  const Result<bool> ran = OnLoop([&] {
    released = source_->ReleaseBatch(holds, checksums);
    return true;
  });
  return ran.ok() ? released : ran.status();
}

std::vector<Result<storage::BlockHeader>> LoopBoundBlockSource::ReadBatch(
    std::span<const storage::BlockRef> refs, std::span<const std::span<uint8_t>> outs) {
  Result<std::vector<Result<storage::BlockHeader>>> read =
      OnLoop([&] { return source_->ReadBatch(refs, outs); });
  if (!read.ok()) return EachFails(refs.size(), read.status());
  return std::move(*read);
}

}  // namespace kvtier::store
