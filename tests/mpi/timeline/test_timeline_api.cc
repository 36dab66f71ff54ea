// Multi-rank timeline tests that drive the C++ API directly. Every rank runs this program under
// mpirun (ranktime_add_mpi_test); each test starts ranktime with its own settings, runs
// operations on every rank, shuts down, and then rank 0 alone reads the file back with
// nlohmann_json (tl_trace.h). Other ranks check only their own operation statuses. main() makes
// every rank exit with the worst result, so the job fails when any rank's test failed.
//
// Output files go to $TL_OUT_DIR (default: the working directory), named by test and job size so
// that the 2- and 4-rank jobs can run side by side.
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ranktime/ranktime.h"
#include "tl_trace.h"

namespace {

using tltest::Trace;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

std::string out_path(const std::string& stem) {
  const char* dir = std::getenv("TL_OUT_DIR");
  return std::string(dir && *dir ? dir : ".") + "/api-" + stem + "-np" +
         std::to_string(world_size()) + ".json";
}

// Starts ranktime with exactly these timeline settings (the variables are read at init()).
// Rank 0 first removes stale files, so that a test cannot pass on an older run's output.
// `skew_us`: this rank's RANKTIME_TEST_CLOCK_SKEW_US, if any.
void start(const std::string& timeline, const std::vector<std::string>& stale = {},
           const std::string& skew_us = "") {
  if (world_rank() == 0) {
    for (const auto& p : stale) std::remove(p.c_str());
    if (!timeline.empty()) std::remove(timeline.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (const char* v : {"TIMELINE_FILENAME", "TIMELINE_MARK_CYCLES", "TIMELINE_ALL_RANKS",
                        "RANKTIME_TEST_CLOCK_SKEW_US"}) {
    unsetenv(v);
  }
  if (!timeline.empty()) setenv("TIMELINE_FILENAME", timeline.c_str(), 1);
  if (!skew_us.empty()) setenv("RANKTIME_TEST_CLOCK_SKEW_US", skew_us.c_str(), 1);
  ranktime::init();
}

// Rank r contributes r + 1 to every element; the sum over ranks is n(n+1)/2 everywhere.
// Returns false (after reporting) when an operation failed or gave a wrong result.
bool allreduce_round(const std::vector<std::string>& names) {
  const int n = ranktime::size(), r = ranktime::rank();
  std::vector<std::vector<int32_t>> data(names.size(), std::vector<int32_t>(4, r + 1));
  std::vector<ranktime::Handle> handles;
  for (size_t i = 0; i < names.size(); ++i) {
    handles.push_back(ranktime::allreduce_async(
        ranktime::TensorView{data[i].data(), ranktime::DataType::kInt32, {4}}, names[i]));
  }
  bool ok = true;
  for (size_t i = 0; i < names.size(); ++i) {
    ranktime::Status s = handles[i].wait();
    EXPECT_TRUE(s.ok()) << "rank " << r << ", tensor " << tltest::printable(names[i]) << ": "
                        << s.message();
    EXPECT_EQ(data[i][0], n * (n + 1) / 2) << "tensor " << tltest::printable(names[i]);
    ok = ok && s.ok() && data[i][0] == n * (n + 1) / 2;
  }
  return ok;
}

// Loads `path` on rank 0 and expects it to be a valid, complete timeline of this job.
bool load(const std::string& path, Trace* t) {
  std::vector<std::string> problems;
  const bool ok = tltest::load_trace(path, t, &problems);
  EXPECT_TRUE(ok) << path << ":\n  " << tltest::join(problems);
  EXPECT_EQ(t->ranks, world_size()) << path;
  if (t->run_end.is_object()) {
    EXPECT_EQ(t->run_end.value("events_dropped", int64_t{-1}), 0) << path;
  }
  return ok;
}

int count_negotiations(const Trace& t, int pid) {
  int c = 0;
  for (const auto& n : t.negotiations) c += n.pid == pid;
  return c;
}

int count_ops(const Trace& t, int pid, int rank) {
  int c = 0;
  for (const auto& o : t.ops) c += o.pid == pid && o.rank == rank;
  return c;
}

std::set<std::string> user_tensors(const Trace& t) {
  std::set<std::string> out;
  for (const auto& n : t.tensor_names()) {
    if (n.rfind("ranktime.", 0) != 0) out.insert(n);
  }
  return out;
}

// Every tensor in `names` was negotiated `times` times and has as many operation slices on every
// rank's lane (TIMELINE_ALL_RANKS defaults to on).
void expect_recorded(const Trace& t, const std::vector<std::string>& names, int times,
                     const std::string& file) {
  for (const auto& name : names) {
    const int pid = t.pid_of(name);
    ASSERT_GT(pid, 0) << file << ": tensor " << tltest::printable(name)
                      << (pid == -2 ? " names more than one process" : " is missing");
    EXPECT_EQ(count_negotiations(t, pid), times) << file << ": tensor " << tltest::printable(name);
    for (int r = 0; r < world_size(); ++r) {
      EXPECT_EQ(count_ops(t, pid, r), times)
          << file << ": tensor " << tltest::printable(name) << ", rank " << r << "'s lane";
    }
  }
}

TEST(ApiTimeline, EscapedNamesRoundTrip) {
  const std::string path = out_path("names");
  const std::vector<std::string> names = {
      "quote\"d",
      "back\\slash",
      "trailing backslash\\",
      "new\nline",
      "tab\there",
      std::string("ctl\x01") + "char",
      std::string("low\x1f") + "and del\x7f",
      std::string("nul-free but \x1b[31mANSI\x1b[0m"),
      "\\u0041 is text, not an escape",
      "ünïcödé/权重/🙂 (UTF-8 source text)",
      std::string("mix \"\\\n\t\x01") + "\xc3\xa9",
      "{\"name\":\"x\",\"ph\":\"B\"},]",
  };
  start(path);
  // Twice: the second time the names are known (already interned, already described).
  const bool ok = allreduce_round(names) && allreduce_round(names);
  ranktime::shutdown();
  if (world_rank() != 0 || !ok) return;

  Trace t;
  ASSERT_TRUE(load(path, &t));
  std::set<std::string> want(names.begin(), names.end());
  EXPECT_EQ(user_tensors(t), want) << "process_name args differ from the submitted names";
  expect_recorded(t, names, 2, path);
}

// Not valid UTF-8 (a C++ caller may pass any bytes): the file must stay valid JSON (the writer
// substitutes U+FFFD), with one process per tensor, whose name keeps the valid prefix.
TEST(ApiTimeline, InvalidUtf8NamesKeepTheFileValid) {
  const std::string path = out_path("bad-utf8");
  const std::vector<std::string> names = {"lone byte \xff.", "truncated \xe6\x9d",
                                          "overlong \xc0\xaf.", "surrogate \xed\xa0\x80."};
  start(path);
  const bool ok = allreduce_round(names);
  ranktime::shutdown();
  if (world_rank() != 0 || !ok) return;

  Trace t;
  ASSERT_TRUE(load(path, &t));
  const std::set<std::string> got = user_tensors(t);
  EXPECT_EQ(got.size(), names.size());
  for (const auto& name : names) {
    const std::string prefix = name.substr(0, name.find(' ') + 1);
    EXPECT_EQ(std::count_if(got.begin(), got.end(),
                            [&](const std::string& g) { return g.rfind(prefix, 0) == 0; }),
              1)
        << "no single tensor named " << prefix << "...";
  }
}

TEST(ApiTimeline, StartStopWindowsWriteSeparateFiles) {
  const std::string a = out_path("window-a"), b = out_path("window-b");
  start("", {a, b});  // no timeline at init
  EXPECT_TRUE(allreduce_round({"before.0", "before.1"}));

  ranktime::Status s = ranktime::start_timeline(a);
  EXPECT_TRUE(s.ok()) << s.message();
  bool ok = allreduce_round({"a.0", "a.1", "a.2", "shared"}) && allreduce_round({"a.0", "shared"});
  s = ranktime::stop_timeline();
  EXPECT_TRUE(s.ok()) << s.message();

  ok = allreduce_round({"between.0", "between.1"}) && ok;

  s = ranktime::start_timeline(b, /*mark_cycles=*/true);
  EXPECT_TRUE(s.ok()) << s.message();
  ok = allreduce_round({"b.0", "b.1", "shared"}) && ok;
  s = ranktime::stop_timeline();
  EXPECT_TRUE(s.ok()) << s.message();

  ok = allreduce_round({"after.0"}) && ok;
  ranktime::shutdown();
  if (world_rank() != 0 || !ok) return;

  Trace ta, tb;
  ASSERT_TRUE(load(a, &ta));
  ASSERT_TRUE(load(b, &tb));
  EXPECT_EQ(user_tensors(ta), (std::set<std::string>{"a.0", "a.1", "a.2", "shared"})) << a;
  EXPECT_EQ(user_tensors(tb), (std::set<std::string>{"b.0", "b.1", "shared"})) << b;
  expect_recorded(ta, {"a.1", "a.2"}, 1, a);
  expect_recorded(ta, {"a.0", "shared"}, 2, a);
  expect_recorded(tb, {"b.0", "b.1", "shared"}, 1, b);
  // Tensor ids are stable for the run; each file describes every tensor it uses.
  EXPECT_EQ(ta.pid_of("shared"), tb.pid_of("shared"));
  // Cycle markers follow each start's mark_cycles.
  EXPECT_EQ(ta.run.value("mark_cycles", true), false) << a;
  EXPECT_TRUE(ta.cycles.empty()) << a;
  EXPECT_EQ(tb.run.value("mark_cycles", false), true) << b;
  EXPECT_FALSE(tb.cycles.empty()) << b;
}

TEST(ApiTimeline, EveryOperationKind) {
  const std::string path = out_path("ops");
  start(path);
  const int n = ranktime::size(), r = ranktime::rank();
  bool ok = true;
  for (int round = 0; round < 2; ++round) {
    std::vector<float> sum(6, 1.0f);
    std::vector<int64_t> gather((r + 1) * 3, r);
    std::vector<double> bcast(5, r);
    auto h1 = ranktime::allreduce_async({sum.data(), ranktime::DataType::kFloat32, {2, 3}},
                                        "k.allreduce");
    auto h2 = ranktime::allgather_async({gather.data(), ranktime::DataType::kInt64, {r + 1, 3}},
                                        "k.allgather");
    auto h3 = ranktime::broadcast_async({bcast.data(), ranktime::DataType::kFloat64, {5}}, n - 1,
                                        "k.broadcast");
    for (auto* h : {&h1, &h2, &h3}) {
      ranktime::Status s = h->wait();
      EXPECT_TRUE(s.ok()) << s.message();
      ok = ok && s.ok();
    }
    ranktime::Status s = ranktime::barrier();
    EXPECT_TRUE(s.ok()) << s.message();
    ok = ok && s.ok();
    EXPECT_EQ(sum[5], static_cast<float>(n));
    EXPECT_EQ(h2.output_shape(), (std::vector<int64_t>{n * (n + 1) / 2, 3}));
    EXPECT_EQ(bcast[4], static_cast<double>(n - 1));
  }
  ranktime::shutdown();
  if (world_rank() != 0 || !ok) return;

  Trace t;
  ASSERT_TRUE(load(path, &t));
  struct Kind {
    const char* tensor;
    const char* op;
    const char* mpi_phase;
    const char* dtype;
  };
  for (const Kind& k : {Kind{"k.allreduce", "ALLREDUCE", "MPI_ALLREDUCE", "float32"},
                        Kind{"k.allgather", "ALLGATHER", "MPI_ALLGATHER", "int64"},
                        Kind{"k.broadcast", "BROADCAST", "MPI_BCAST", "float64"},
                        Kind{"ranktime.barrier", "BARRIER", nullptr, nullptr}}) {
    SCOPED_TRACE(k.tensor);
    const int pid = t.pid_of(k.tensor);
    ASSERT_GT(pid, 0);
    EXPECT_EQ(count_negotiations(t, pid), 2);
    for (const auto& neg : t.negotiations) {
      if (neg.pid == pid) {
        EXPECT_EQ(neg.op, k.op);
      }
    }
    for (int rank = 0; rank < n; ++rank) {
      EXPECT_EQ(count_ops(t, pid, rank), 2) << "rank " << rank;
    }
    for (const auto& o : t.ops) {
      if (o.pid != pid) continue;
      EXPECT_EQ(o.op, k.op);
      ASSERT_FALSE(o.phases.empty());
      EXPECT_EQ(o.phases.front(), "QUEUE");
      if (k.mpi_phase) {
        EXPECT_NE(std::find(o.phases.begin(), o.phases.end(), k.mpi_phase), o.phases.end())
            << "rank " << o.rank << " has no " << k.mpi_phase << " sub-phase";
      }
      if (k.dtype) {
        EXPECT_EQ(o.begin_args.value("dtype", ""), k.dtype);
      }
      if (std::string(k.op) == "ALLGATHER") {
        // Each lane carries its own rank's shape and bytes: lanes are attributed to the right rank.
        EXPECT_EQ(o.begin_args.value("shape", tltest::json()), tltest::json::array({o.rank + 1, 3}))
            << "rank " << o.rank;
        EXPECT_EQ(o.begin_args.value("bytes", int64_t{-1}), (o.rank + 1) * 3 * 8)
            << "rank " << o.rank;
      }
    }
  }
}

TEST(ApiTimeline, MismatchedRequestsCarryTheErrorAndNoOperationSlice) {
  const std::string path = out_path("mismatch");
  start(path);
  const int r = ranktime::rank();
  std::vector<float> x(r + 2, 1.0f);  // a different shape on every rank
  ranktime::Status s =
      ranktime::allreduce_async({x.data(), ranktime::DataType::kFloat32, {r + 2}}, "bad.shape")
          .wait();
  EXPECT_FALSE(s.ok()) << "mismatched shapes must fail on every rank";
  const bool ok = allreduce_round({"good.after"});
  ranktime::shutdown();
  if (world_rank() != 0 || !ok) return;

  Trace t;
  ASSERT_TRUE(load(path, &t));
  const int pid = t.pid_of("bad.shape");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(count_negotiations(t, pid), 1);
  for (const auto& n : t.negotiations) {
    if (n.pid == pid) {
      EXPECT_TRUE(n.has_error) << "the NEGOTIATE E lacks the error arg";
    }
  }
  for (int rank = 0; rank < world_size(); ++rank) {
    EXPECT_EQ(count_ops(t, pid, rank), 0);
  }
  expect_recorded(t, {"good.after"}, 1, path);
}

// Regions (docs/timeline-format.md): each rank's on its own process's regions thread, nested,
// on rank 0's clock under clock skew, with blocked_us where the rank waited inside ranktime.
// Rank 1 sleeps in "data" before its allreduce; rank 0 waits for it inside "backward".
TEST(ApiTimeline, RegionsNestWaitAndAlign) {
  const std::string path = out_path("regions");
  // Rank 1's clock 100 ms ahead of rank 0's: unaligned, its regions would come 100 ms late.
  start(path, {}, world_rank() == 1 ? "50000" : "-50000");
  const int r = ranktime::rank();
  {
    ranktime::Region step("step");
    {
      ranktime::Region data("data");
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    ranktime::region_begin("backward");
    EXPECT_TRUE(allreduce_round({"regions.grad"}));
    ranktime::region_end("backward");
  }
  ranktime::Region("</script><script>alert(1)</script>");
  // Bad input: an error naming the region and the rank, and nothing recorded.
  const std::string rank_text = "on rank " + std::to_string(r);
  try {
    ranktime::region_end("never begun");
    ADD_FAILURE() << "an end without a begin did not throw";
  } catch (const ranktime::Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"never begun\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(rank_text), std::string::npos) << e.what();
  }
  ranktime::region_begin("elsewhere");
  std::string other_thread;
  std::thread([&] {
    try {
      ranktime::region_end("elsewhere");
    } catch (const ranktime::Error& e) {
      other_thread = e.what();
    }
  }).join();
  EXPECT_NE(other_thread.find("begun on another thread"), std::string::npos) << other_thread;
  EXPECT_NE(other_thread.find(rank_text), std::string::npos) << other_thread;
  ranktime::region_end("elsewhere");
  // Still open at shutdown: a warning naming it and the rank (stderr caught in a file).
  ranktime::region_begin("left open");
  std::fflush(stderr);
  const int saved_stderr = dup(2);
  FILE* caught = std::tmpfile();
  dup2(fileno(caught), 2);
  ranktime::shutdown();
  std::fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  std::string warnings(4096, '\0');
  std::rewind(caught);
  warnings.resize(std::fread(warnings.data(), 1, warnings.size(), caught));
  std::fclose(caught);
  EXPECT_NE(warnings.find("region \"left open\" is still open at shutdown " + rank_text),
            std::string::npos)
      << warnings;
  ranktime::region_end("left open");  // without a runtime: checked, not recorded
  if (world_rank() != 0) return;

  Trace t;
  ASSERT_TRUE(load(path, &t));
  // (name, rank) -> slice
  std::map<std::pair<std::string, int>, json> slices;
  for (const json& e : t.regions) {
    const int rank = e["pid"].get<int>() - tltest::kRankProcessPidBase;
    EXPECT_EQ(e["tid"], 1);
    EXPECT_TRUE(slices.emplace(std::pair{e["name"].get<std::string>(), rank}, e).second)
        << "twice: " << e.dump();
  }
  EXPECT_EQ(static_cast<int>(slices.size()), 5 * world_size());  // "never begun" is not one
  for (int rank = 0; rank < world_size(); ++rank) {
    EXPECT_EQ(t.process_names[tltest::kRankProcessPidBase + rank], "rank " + std::to_string(rank));
    EXPECT_EQ((t.thread_names[{tltest::kRankProcessPidBase + rank, 1}]), "regions");
    const json& step = slices[{"step", rank}];
    const auto end = [](const json& e) { return e["ts"].get<double>() + e["dur"].get<double>(); };
    for (const char* inner : {"data", "backward"}) {
      const json& in = slices[{inner, rank}];
      EXPECT_GE(in["ts"].get<double>(), step["ts"].get<double>()) << inner;
      EXPECT_LE(end(in), end(step)) << inner;
    }
    EXPECT_TRUE(slices.count({"</script><script>alert(1)</script>", rank}));
  }
  // Rank 0 waited for rank 1 inside backward: blocked, and rank 1's data (its sleep) ended
  // before rank 0's backward could: true on rank 0's clock only if rank 1's was aligned.
  const json& backward0 = slices[{"backward", 0}];
  ASSERT_TRUE(backward0.contains("args")) << backward0.dump();
  EXPECT_GT(backward0["args"]["blocked_us"].get<double>(), 0);
  EXPECT_FALSE(slices[{"data", 1}].contains("args"));  // never blocked in its sleep
  const json& data1 = slices[{"data", 1}];
  EXPECT_LE(data1["ts"].get<double>() + data1["dur"].get<double>(),
            backward0["ts"].get<double>() + backward0["dur"].get<double>());
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  if (world_rank() != 0) {
    // One report per job: other ranks print only their failures.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int result = RUN_ALL_TESTS();
  if (world_rank() != 0 && result != 0)
    std::fprintf(stderr, "rank %d: a test failed on this rank\n", world_rank());
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
