// A word that ends a sleep when another thread, or another process, changes it (a Linux futex).
// Rank 0's background thread sleeps on one shared with the ranks of its host
// (ControlChannel::share_rank0_wake), so that a worker's message wakes it instead of being found
// by the next poll (docs/architecture.md, "Waiting without spinning").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ranktime {

// Two 32-bit words, laid out alike in private and in shared memory.
struct WakeWords {
  std::atomic<uint32_t> value{0};     // bumped by every wake()
  std::atomic<uint32_t> sleeping{0};  // 1 while the one waiter is in the kernel
};

class WakeWord {
 public:
  // `words` outlive this object; `shared`: they are in memory mapped by several processes
  // (MAP_SHARED), so the futex calls must not be process-private.
  WakeWord(WakeWords* words, bool shared) : words_(words), shared_(shared) {}

  // Read before checking for work; pass it to wait().
  uint32_t value() const { return words_->value.load(); }
  // Any thread or process: bumps the word, and enters the kernel only when the waiter sleeps.
  void wake();
  // The one waiter: sleeps until the word differs from `seen` (at once if it already does) or
  // `timeout` has passed. True when the word changed.
  bool wait(uint32_t seen, std::chrono::nanoseconds timeout);
  // While another thread polls for what the waiter waits for: wake() only bumps the word, even
  // while the waiter sleeps (a wake-up would only take a core from the poller).
  void mute() { words_->sleeping.store(0); }
  // Ends mute(): wake() enters the kernel again (also if the waiter has woken meanwhile, until
  // its next wait; that costs a syscall, not a lost wake). Read the word after this to learn
  // whether anything bumped it while muted.
  void unmute() { words_->sleeping.store(1); }

 private:
  WakeWords* words_;
  bool shared_;
};

}  // namespace ranktime
