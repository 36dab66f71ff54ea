// Who runs the loop's steps (SubmissionQueue::begin_loop_step / begin_caller_steps): one thread
// at a time; the background loop sleeps through a user thread's steps and gets its next step when
// they are handed back with work left, when the caller withdraws, or (with a wake word) when a
// message may have come meanwhile; a submission made for the caller's own steps wakes nobody.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "core/clock.h"
#include "runtime/submission_queue.h"
#include "runtime/wake_word.h"

namespace ranktime {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::unique_ptr<TensorEntry> entry(const std::string& name) {
  auto e = std::make_unique<TensorEntry>();
  e->handle = std::make_shared<detail::HandleState>();
  e->request.name = name;
  return e;
}

// The background thread's sleep, on its own thread: its result once it ends.
std::future<bool> sleep_in_background(SubmissionQueue& queue, std::chrono::nanoseconds timeout) {
  return std::async(std::launch::async, [&queue, timeout] { return queue.wait(timeout, false); });
}

// The background loop until it gets a step, on its own thread (Runtime::loop: a wait that ends
// while a user thread still has the steps is followed by another): ready once it has one.
std::future<void> loop_until_its_step(SubmissionQueue& queue) {
  return std::async(std::launch::async, [&queue] {
    while (!queue.begin_loop_step()) queue.wait(seconds(60), false);
    queue.end_loop_step();
  });
}

constexpr auto kReady = std::future_status::ready;
constexpr auto kStillWaiting = std::future_status::timeout;

TEST(CallerSteps, OneThreadAtATime) {
  SubmissionQueue queue;
  ASSERT_TRUE(queue.begin_caller_steps());
  EXPECT_FALSE(queue.begin_loop_step());     // the caller has them
  EXPECT_FALSE(queue.begin_caller_steps());  // and another caller waits too
  queue.end_caller_steps(false, queue.wake_value());
  ASSERT_TRUE(queue.begin_loop_step());
  EXPECT_FALSE(queue.begin_caller_steps());  // asks: the loop hands over after its step
  queue.end_loop_step();
  EXPECT_FALSE(queue.begin_loop_step());  // asked for: not the loop's next step
  EXPECT_TRUE(queue.begin_caller_steps());
  queue.end_caller_steps(false, queue.wake_value());
  EXPECT_TRUE(queue.begin_loop_step());
  queue.end_loop_step();
}

TEST(CallerSteps, ASubmissionForTheCallersOwnStepsWakesNobody) {
  const Clock clock;
  WakeWords words;  // to see when the loop is asleep
  WakeWord word(&words, /*shared=*/false);
  SubmissionQueue queue;
  queue.set_wake_word(&word);
  auto asleep = sleep_in_background(queue, milliseconds(200));
  while (words.sleeping.load() == 0) std::this_thread::yield();
  queue.submit(entry("mine"), "", clock, /*wake_loop=*/false);
  EXPECT_FALSE(asleep.get());  // timed out: nothing woke it
  // Without the caller's steps after all, the loop sees it at its next look.
  EXPECT_TRUE(queue.wait(milliseconds(0), false));
}

TEST(CallerSteps, TheLoopSleepsThroughTheCallersStepsAndWakesWhenWorkIsHandedBack) {
  const Clock clock;
  SubmissionQueue queue;
  ASSERT_TRUE(queue.begin_caller_steps());
  auto loop = loop_until_its_step(queue);
  // Another thread's submission would end the sleep, but the caller owns the steps (it takes it).
  queue.submit(entry("other"), "", clock);
  EXPECT_EQ(loop.wait_for(milliseconds(100)), kStillWaiting);
  std::vector<std::unique_ptr<TensorEntry>> taken;
  queue.take(&taken);
  ASSERT_EQ(taken.size(), 1u);
  queue.end_caller_steps(/*work_left=*/true, queue.wake_value());
  // A minute: only a lost wake lets it run out.
  EXPECT_EQ(loop.wait_for(seconds(60)), kReady);
}

TEST(CallerSteps, NothingLeftLeavesTheLoopAsleep) {
  SubmissionQueue queue;
  ASSERT_TRUE(queue.begin_caller_steps());
  auto asleep = sleep_in_background(queue, milliseconds(200));
  queue.end_caller_steps(false, queue.wake_value());
  EXPECT_FALSE(asleep.get());
}

TEST(CallerSteps, ASubmissionLeftUntakenWakesTheLoopAtTheEnd) {
  const Clock clock;
  SubmissionQueue queue;
  ASSERT_TRUE(queue.begin_caller_steps());
  queue.submit(entry("late"), "", clock);  // after the caller's last take
  auto loop = loop_until_its_step(queue);
  EXPECT_EQ(loop.wait_for(milliseconds(100)), kStillWaiting);
  queue.end_caller_steps(false, queue.wake_value());
  EXPECT_EQ(loop.wait_for(seconds(60)), kReady);
}

TEST(CallerSteps, AWithdrawnCallerWakesTheLoopForItsSubmission) {
  const Clock clock;
  SubmissionQueue queue;
  ASSERT_TRUE(queue.begin_loop_step());
  queue.submit(entry("mine"), "", clock, /*wake_loop=*/false);
  EXPECT_FALSE(queue.begin_caller_steps());  // the loop is inside a step: ask
  queue.end_loop_step();
  auto loop = loop_until_its_step(queue);
  EXPECT_EQ(loop.wait_for(milliseconds(100)), kStillWaiting);  // asked for
  queue.withdraw_caller();  // the caller gave up waiting for the steps
  EXPECT_EQ(loop.wait_for(seconds(60)), kReady);
}

TEST(CallerSteps, AWakeWordMovedDuringTheCallersStepsWakesTheLoop) {
  WakeWords words;
  WakeWord word(&words, /*shared=*/false);
  SubmissionQueue queue;
  queue.set_wake_word(&word);
  ASSERT_TRUE(queue.begin_caller_steps());
  const uint32_t seen = queue.wake_value();  // before the caller's last step
  auto loop = loop_until_its_step(queue);
  while (words.sleeping.load() == 0) std::this_thread::yield();  // (nearly) in the kernel
  word.mute();  // as a caller's steps do; a worker's message now only bumps the word
  word.wake();
  EXPECT_EQ(loop.wait_for(milliseconds(100)), kStillWaiting);
  // The bump came after `seen`: the message may not have been received by the caller's steps.
  queue.end_caller_steps(false, seen);
  EXPECT_EQ(loop.wait_for(seconds(60)), kReady);
}

}  // namespace
}  // namespace ranktime
