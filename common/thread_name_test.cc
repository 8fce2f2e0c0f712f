#include "common/thread_name.h"

#include <pthread.h>

#include <array>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::string NameOf(pthread_t thread) {
  std::array<char, 32> name{};
  if (pthread_getname_np(thread, name.data(), name.size()) != 0) return "<unreadable>";
  return name.data();
}

// A short name is kept whole; a long one is cut at the kernel's 15 bytes, not refused.
TEST(ThreadNameTest, NamesTheCallingThreadAndCutsLongNames) {
  std::string short_name, long_name;
  std::thread([&] {
    NameThisThread("kvt-stream-2");
    short_name = NameOf(pthread_self());
    NameThisThread("kvt-a-name-longer-than-fifteen");
    long_name = NameOf(pthread_self());
  }).join();
  EXPECT_EQ(short_name, "kvt-stream-2");
  EXPECT_EQ(long_name, "kvt-a-name-long");
}

}  // namespace
}  // namespace kvtier
