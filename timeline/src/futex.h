// Linux futex calls on a 32-bit atomic word: the trace writer's idle detector
// (idle_detector.cc) and rank 0's wake word (collective/src/runtime/wake_word.cc).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

namespace ranktime::futex {

// std::atomic of a 32-bit integer is a lock-free word with the integer's layout.
template <typename T>
int* address(std::atomic<T>* word) {
  static_assert(sizeof(T) == 4 && std::atomic<T>::is_always_lock_free, "futex words are 32 bits");
  return reinterpret_cast<int*>(word);
}

// Sleeps while `*word` holds `expected`, until woken, `timeout` (relative; null: none) or a
// signal. `shared`: the word is in memory mapped by several processes.
template <typename T>
void wait(std::atomic<T>* word, T expected, const timespec* timeout = nullptr,
          bool shared = false) {
  ::syscall(SYS_futex, address(word), shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE,
            static_cast<int>(expected), timeout, nullptr, 0);
}

// Wakes one thread sleeping on `word`.
template <typename T>
void wake(std::atomic<T>* word, bool shared = false) {
  ::syscall(SYS_futex, address(word), shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr,
            0);
}

}  // namespace ranktime::futex
