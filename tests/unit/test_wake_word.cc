// WakeWord (runtime/wake_word.h) in private memory: a wake from another thread ends the wait and
// says so; a wake that came before the wait ends it at once; a wait that nobody ends says it
// timed out.
#include "runtime/wake_word.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace ranktime {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(WakeWord, AWakeFromAnotherThreadEndsTheWait) {
  WakeWords words;
  WakeWord word(&words, /*shared=*/false);
  const uint32_t seen = word.value();
  std::atomic<bool> waiting{false};
  std::thread waker([&] {
    while (!waiting.load()) std::this_thread::yield();
    // Until the waiter is in the kernel: the wake must then go through the futex.
    while (words.sleeping.load() == 0) std::this_thread::yield();
    word.wake();
  });
  waiting = true;
  // A minute: only a lost wake lets it run out (and then the test fails, it does not hang).
  EXPECT_TRUE(word.wait(seen, seconds(60)));
  waker.join();
  EXPECT_NE(word.value(), seen);
  EXPECT_EQ(words.sleeping.load(), 0u);
}

TEST(WakeWord, AWakeBeforeTheWaitEndsItAtOnce) {
  WakeWords words;
  WakeWord word(&words, /*shared=*/false);
  const uint32_t seen = word.value();
  word.wake();  // between reading the word and sleeping: the sleep must not start
  EXPECT_TRUE(word.wait(seen, seconds(60)));
}

TEST(WakeWord, AWaitNobodyEndsTimesOut) {
  WakeWords words;
  WakeWord word(&words, /*shared=*/false);
  EXPECT_FALSE(word.wait(word.value(), milliseconds(1)));
  EXPECT_FALSE(word.wait(word.value(), milliseconds(0)));
}

}  // namespace
}  // namespace ranktime
