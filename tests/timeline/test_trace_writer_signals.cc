// TraceWriter tests of SIGINT/SIGTERM (install_signal_flush): every open writer is flushed and
// closed, then the signal takes its course; and of SIGKILL, after which a file holds what was
// flushed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ranktime/timeline/record.h"
#include "ranktime/timeline/string_table.h"
#include "ranktime/timeline/trace_writer.h"
#include "trace_files.h"
#include "trace_test_data.h"

namespace ranktime::timeline::test {
namespace {

// Each test forks: the child opens writers, installs the flush and gets a signal; the parent
// checks how the child ended and reads the files. Children report failures by exit code, and an
// alarm kills a child that hangs so the test fails instead of blocking.

constexpr int kSignalRecords = 1500;

volatile sig_atomic_t g_previous_handler_ran = 0;

// Child side: two open writers with records pushed but not flushed (a long flush interval and a
// buffer that never gets half full), so only the signal path can write them.
[[noreturn]] void child_pushes_then_signals(int sig, const std::string& a, const std::string& b,
                                            bool wait_for_files) {
  alarm(60);
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.w");
  TraceWriterOptions options = options_for(a);
  options.capacity_records = 4 * kSignalRecords;
  std::string error;
  auto first = TraceWriter::open(options, two_rank_metadata(), strings, &error);
  options.path = b;
  auto second = TraceWriter::open(options, two_rank_metadata(), strings, &error);
  if (!first || !second) _exit(3);
  install_signal_flush();
  install_signal_flush();  // installed once
  for (int i = 0; i < kSignalRecords; ++i) {
    first->push(span(tensor, 0, Phase::kQueue, at_us(i), at_us(i + 1)));
    second->push(cycle(at_us(i), i + 1));
  }
  raise(sig);
  if (wait_for_files) {
    // A chained handler let the process live: wait for the watcher to finish both files.
    for (;;) {
      try {
        if (read_trace(a).back()["name"] == "ranktime_run_end" &&
            read_trace(b).back()["name"] == "ranktime_run_end") {
          _exit(g_previous_handler_ran ? 0 : 7);
        }
      } catch (const std::exception&) {
        // Read while the closing pwrite was under way; the parent checks the final file.
      }
      usleep(1000);
    }
  }
  for (;;) pause();
}

void expect_complete_after_signal(const std::string& a, const std::string& b) {
  const json first = read_trace(a);
  size_t spans = 0;
  for (const json& e : first) spans += e["ph"] == "X";
  EXPECT_EQ(spans, static_cast<size_t>(kSignalRecords));
  ASSERT_EQ(first.back()["name"], "ranktime_run_end");
  EXPECT_EQ(first.back()["args"]["events_written"], first.size());
  EXPECT_EQ(first.back()["args"]["events_dropped"], 0);

  const json second = read_trace(b);
  std::vector<int64_t> cycles;
  for (const json& e : second) {
    if (e["name"] == "CYCLE_START") cycles.push_back(e["args"]["cycle"]);
  }
  ASSERT_EQ(cycles.size(), static_cast<size_t>(kSignalRecords));
  for (int i = 0; i < kSignalRecords; ++i) EXPECT_EQ(cycles[i], i + 1);
  EXPECT_EQ(second.back()["name"], "ranktime_run_end");
}

void expect_signal_flushes_and_kills(int sig, const std::string& extension = ".json") {
  TempDir dir;
  const std::string a = dir.file("a" + extension), b = dir.file("b" + extension);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) child_pushes_then_signals(sig, a, b, false);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), sig) << strsignal(WTERMSIG(status));
  expect_complete_after_signal(a, b);
}

TEST(TraceWriterSignals, SigtermFlushesEveryOpenWriterThenKills) {
  expect_signal_flushes_and_kills(SIGTERM);
}

TEST(TraceWriterSignals, SigintFlushesEveryOpenWriterThenKills) {
  expect_signal_flushes_and_kills(SIGINT);
}

TEST(TraceWriterSignals, SigtermCompletesAGzipStream) {  // read_trace() checks the stream too
  expect_signal_flushes_and_kills(SIGTERM, ".json.gz");
}

// SIGKILL leaves no chance to close: a gzip file still decompresses, as a whole stream and a
// complete array, to every event up to the last flush (each piece ends with a sync flush and a
// closing block that the next piece overwrites).
TEST(TraceWriterSignals, AfterSigkillAGzipFileHoldsEveryEventUpToTheLastFlush) {
  TempDir dir;
  const std::string path = dir.file("t.json.gz");
  int progress[2];
  ASSERT_EQ(pipe(progress), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(60);
    close(progress[0]);
    StringTable strings;
    std::vector<uint32_t> tensors;
    for (int i = 0; i < 10; ++i) tensors.push_back(strings.intern("g" + std::to_string(i)));
    std::string error;
    auto writer = TraceWriter::open(options_for(path), two_rank_metadata(), strings, &error);
    if (!writer) _exit(3);
    for (int step = 0; step < 5; ++step) {
      const std::vector<Record> records = training_step(tensors, 3, step, at_us(20000.0 * step));
      writer->push(records.data(), records.size());
      writer->flush();
      const char done = static_cast<char>(step);
      if (write(progress[1], &done, 1) != 1) _exit(4);
    }
    // More records, never flushed: the kill loses them.
    const std::vector<Record> records = training_step(tensors, 3, 5, at_us(100000));
    writer->push(records.data(), records.size());
    for (;;) pause();
  }
  close(progress[1]);
  char done = 0;
  for (int step = 0; step < 5; ++step) ASSERT_EQ(read(progress[0], &done, 1), 1);
  close(progress[0]);
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  const json trace = read_trace(path);  // throws unless a whole stream and a complete array
  EXPECT_NE(trace.back()["name"], "ranktime_run_end");
  std::vector<int64_t> steps;
  for (const json& e : trace) {
    if (e["name"] == "STEP" && e["tid"] == 1) steps.push_back(e["args"]["step"]);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

// The runtime's thread keeps pushing while the signal is handled: the file must still end
// complete, with every record accepted before the close, in order.
TEST(TraceWriterSignals, SigtermWhileAProducerIsPushing) {
  TempDir dir;
  const std::string path = dir.file("t.json");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(60);
    StringTable strings;
    TraceWriterOptions options = options_for(path);
    options.capacity_records = 1 << 16;
    options.flush_interval = std::chrono::milliseconds(2);
    std::string error;
    auto writer = TraceWriter::open(options, two_rank_metadata(), strings, &error);
    if (!writer) _exit(3);
    install_signal_flush();
    std::atomic<int64_t> pushed{0};
    std::thread producer([&] {
      for (int64_t i = 1;; ++i) {
        writer->push(cycle(at_us(static_cast<double>(i)), i));
        pushed.store(i);
        if (i % 64 == 0) std::this_thread::yield();
      }
    });
    while (pushed.load() < 20000) std::this_thread::yield();
    raise(SIGTERM);
    for (;;) pause();
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);

  const json trace = read_trace(path);
  ASSERT_EQ(trace.back().at("name"), "ranktime_run_end");
  EXPECT_EQ(trace.back()["args"]["events_written"], trace.size());
  std::vector<int64_t> cycles;
  for (const json& e : trace) {
    if (e.at("name") == "CYCLE_START") cycles.push_back(e["args"]["cycle"]);
  }
  ASSERT_GE(cycles.size(), 1u);
  for (size_t i = 1; i < cycles.size(); ++i) ASSERT_LT(cycles[i - 1], cycles[i]);
  // Every record up to the last one kept is in the file, unless it was counted as dropped.
  const int64_t holes = cycles.back() - static_cast<int64_t>(cycles.size());
  EXPECT_LE(holes, trace.back()["args"]["events_dropped"].get<int64_t>());
  EXPECT_GE(cycles.back() + trace.back()["args"]["events_dropped"].get<int64_t>(), 20000);
}

TEST(TraceWriterSignals, ChainsToAPreviousHandler) {
  TempDir dir;
  const std::string a = dir.file("a.json"), b = dir.file("b.json");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    struct sigaction action = {};
    action.sa_handler = [](int) { g_previous_handler_ran = 1; };
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    child_pushes_then_signals(SIGINT, a, b, true);  // exits 0 once both files are complete
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by " << strsignal(WTERMSIG(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  expect_complete_after_signal(a, b);
}

TEST(TraceWriterSignals, ChildForkedAfterInstallDiesBySigtermAndLeavesTheFileAlone) {
  TempDir dir;
  const std::string path = dir.file("t.json");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(60);
    StringTable strings;
    std::string error;
    auto writer = TraceWriter::open(options_for(path), two_rank_metadata(), strings, &error);
    if (!writer) _exit(3);
    install_signal_flush();
    writer->push(cycle(at_us(1), 1));
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      writer.reset();  // its copy of the writer: must neither hang nor touch the file
      raise(SIGTERM);  // the default action again: dies (a stale handler would hang it)
      for (;;) pause();
    }
    int status = 0;
    if (waitpid(grandchild, &status, 0) != grandchild) _exit(5);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGTERM) _exit(6);
    writer->push(cycle(at_us(2), 2));
    writer->close();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by " << strsignal(WTERMSIG(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const json trace = read_trace(path);
  ASSERT_EQ(trace.size(), 7u);
  EXPECT_EQ(trace[4]["args"]["cycle"], 1);
  EXPECT_EQ(trace[5]["args"]["cycle"], 2);
  EXPECT_EQ(trace[6]["name"], "ranktime_run_end");
}

}  // namespace
}  // namespace ranktime::timeline::test
