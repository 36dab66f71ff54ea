// Futex waits and wakes (see wake_word.h).
#include "runtime/wake_word.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace ranktime {
namespace {

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout,
           bool shared) {
  // std::atomic<uint32_t> is a lock-free 32-bit word with the layout of uint32_t.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
                   shared ? op : (op | FUTEX_PRIVATE_FLAG), value, timeout, nullptr, 0);
}

}  // namespace

void WakeWord::wake() {
  // Sequentially consistent, like the waiter's store of `sleeping` then load of the word: either
  // the waiter sees the new value (its futex wait returns at once) or this sees it sleeping.
  words_->value.fetch_add(1);
  if (words_->sleeping.load() != 0) futex(&words_->value, FUTEX_WAKE, 1, nullptr, shared_);
}

bool WakeWord::wait(uint32_t seen, std::chrono::nanoseconds timeout) {
  if (words_->value.load() != seen) return true;
  const auto ns = timeout.count() > 0 ? timeout.count() : 0;
  const timespec relative{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  words_->sleeping.store(1);
  // Returns on a wake, at once when the word is no longer `seen` (EAGAIN), at the timeout, or
  // on a signal; the word says which matters.
  futex(&words_->value, FUTEX_WAIT, seen, &relative, shared_);
  words_->sleeping.store(0);
  return words_->value.load() != seen;
}

}  // namespace ranktime
