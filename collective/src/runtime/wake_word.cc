// Futex waits and wakes (see wake_word.h).
#include "runtime/wake_word.h"

#include <time.h>

#include "futex.h"

namespace ranktime {

void WakeWord::wake() {
  // Sequentially consistent, like the waiter's store of `sleeping` then load of the word: either
  // the waiter sees the new value (its futex wait returns at once) or this sees it sleeping.
  words_->value.fetch_add(1);
  if (words_->sleeping.load() != 0) futex::wake(&words_->value, shared_);
}

bool WakeWord::wait(uint32_t seen, std::chrono::nanoseconds timeout) {
  if (words_->value.load() != seen) return true;
  const auto ns = timeout.count() > 0 ? timeout.count() : 0;
  const timespec relative{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  words_->sleeping.store(1);
  // Returns on a wake, at once when the word is no longer `seen` (EAGAIN), at the timeout, or
  // on a signal; the word says which matters.
  futex::wait(&words_->value, seen, &relative, shared_);
  words_->sleeping.store(0);
  return words_->value.load() != seen;
}

}  // namespace ranktime
