// The readers on what the writer writes (docs/timeline-format.md): what it leaves implicit filled
// in (a tick's lag, a lane's args, a fused batch's shared sub-phases), gzip files (read, cut,
// corrupt, repaired), and rotated files read as one run. Traces come from the real TraceWriter.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ranktime/timeline/trace_analysis.h"
#include "ranktime/timeline/trace_check.h"
#include "ranktime/timeline/trace_reader.h"
#include "ranktime/timeline/trace_repair.h"
#include "ranktime/timeline/trace_writer.h"
#include "trace_files.h"
#include "trace_test_data.h"

namespace ranktime::timeline {
namespace {

using test::TempDir;
using test::training_step;

std::vector<TraceEvent> read_all(const std::string& path, TraceReadResult* result = nullptr) {
  std::vector<TraceEvent> events;
  TraceReadResult r = read_trace_file(path, [&](const TraceEvent& e) {
    events.push_back(e);
    return true;
  });
  if (result) *result = r;
  return events;
}

// A run of `steps` training steps of 8 tensors at 3 ranks, written by the TraceWriter.
uint64_t write_run(const std::string& path, int steps, uint64_t max_bytes = 0) {
  StringTable strings;
  std::vector<uint32_t> tensors;
  for (int i = 0; i < 8; ++i) tensors.push_back(strings.intern("grad." + std::to_string(i)));
  TraceWriterOptions options = test::options_for(path);
  options.max_bytes = max_bytes;
  RunMetadata metadata = test::two_rank_metadata();
  metadata.ranks = 3;
  metadata.hostnames.assign(3, "n1");
  metadata.pids.assign(3, 1);
  metadata.clock_offsets_us.assign(3, 0);
  metadata.clock_uncertainty_us.assign(3, 0);
  auto writer = test::open_or_fail(options, strings, metadata);
  for (int s = 0; s < steps; ++s) {
    const std::vector<Record> records = training_step(tensors, 3, s, test::at_us(20000.0 * s));
    writer->push(records.data(), records.size());
    if (s % 4 == 0) writer->flush();
  }
  writer->close();
  return writer->files_opened();
}

TraceChecker check(const std::string& path, TraceReadResult* read_out = nullptr) {
  TraceChecker checker;
  const TraceReadResult read = read_trace_file(path, [&](const TraceEvent& e) {
    checker.add(e);
    return true;
  });
  checker.finish(read);
  if (read_out) *read_out = read;
  return checker;
}

std::string messages(const TraceChecker& c) {
  std::string out;
  for (const TraceViolation& v : c.violations())
    out += "#" + std::to_string(v.event_index) + ": " + v.message + "\n";
  return out;
}

// What the file leaves implicit reaches readers filled in: every tick its rank and lag, every
// operation slice its lane's dtype/shape/bytes and fused_tensors, every tensor of a fused batch
// the batch's sub-phases.
TEST(TraceFormat, ReadersSeeWhatTheFileLeavesImplicit) {
  TempDir dir;
  write_run(dir.file("t.json"), 3);
  const std::vector<TraceEvent> events = read_all(dir.file("t.json"));
  std::map<std::pair<int64_t, int64_t>, int> operations, queues;
  size_t ticks = 0;
  for (const TraceEvent& e : events) {
    if (e.phase() == 'X' && e.tid == 0 && e.pid > 0 && e.name != "NEGOTIATE_ALLREDUCE") {
      ++ticks;
      EXPECT_EQ(e.args["rank"], std::stoi(e.name));
      // training_step() makes rank r ready 30 us x r after rank 0.
      EXPECT_NEAR(e.args["lag_us"].get<double>(), 30.0 * std::stoi(e.name), 1e-6);
    }
    if (e.phase() == 'B' && e.name == "ALLREDUCE") {
      ++operations[{e.pid, e.tid}];
      EXPECT_EQ(e.args["dtype"], "float32");
      EXPECT_EQ(e.args["shape"][0], 64);
      EXPECT_EQ(e.args["bytes"], 256 * (e.pid - 2));  // tensor i (pid 2 + i): 256 x i
      EXPECT_EQ(e.args["fused_tensors"], 4);
    }
    if (e.phase() == 'B' && e.name == "QUEUE") ++queues[{e.pid, e.tid}];
  }
  EXPECT_EQ(ticks, 3u * 8 * 3);
  EXPECT_EQ(operations.size(), 8u * 3);  // every tensor on every lane
  EXPECT_EQ(queues, operations);         // each with its batch's sub-phases, every step
  for (const auto& [lane, count] : operations) EXPECT_EQ(count, 3) << lane.first;

  const TraceChecker checker = check(dir.file("t.json"));
  EXPECT_TRUE(checker.ok()) << messages(checker);
  EXPECT_EQ(checker.negotiations(), 3u * 8);
  EXPECT_EQ(checker.flows(), 3u * 8);  // one arrow per negotiation into rank 0's lane
}

// A writer that repeats the sub-phases for every tensor of a batch gets no extra copies.
TEST(TraceFormat, SubPhasesOfTheirOwnAreNotCopied) {
  const std::string text = R"([
{"name":"ALLREDUCE","ph":"X","pid":1,"tid":1,"ts":10.000,"dur":5.000,"args":{"dtype":"float32","shape":[4],"bytes":16,"fused_tensors":2}},
{"name":"QUEUE","ph":"X","pid":1,"tid":1,"ts":10.000,"dur":1.000},
{"name":"ALLREDUCE","ph":"X","pid":2,"tid":1,"ts":10.000,"dur":5.000,"args":{"dtype":"float32","shape":[4],"bytes":16,"fused_tensors":2}},
{"name":"QUEUE","ph":"X","pid":2,"tid":1,"ts":10.000,"dur":1.000}
])";
  std::istringstream in(text);
  std::map<int64_t, int> queues;
  read_trace(in, [&](const TraceEvent& e) {
    queues[e.pid] += e.name == "QUEUE" && e.phase() == 'B';
    return true;
  });
  EXPECT_EQ(queues, (std::map<int64_t, int>{{1, 1}, {2, 1}}));
}

std::string gzip_of(const std::string& text) {
  std::string out(compressBound(text.size()) + 64, '\0');
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A gzip trace reads as its text: the same events; cut anywhere, the complete events before the
// cut and a truncated result that says so; corrupt, an error that says where.
TEST(TraceFormat, GzipReadsAsItsText) {
  TempDir dir;
  write_run(dir.file("t.json"), 4);
  write_run(dir.file("t.json.gz"), 4);
  const std::string text = test::file_text(dir.file("t.json"));
  EXPECT_EQ(test::file_text(dir.file("t.json.gz")), text);
  EXPECT_TRUE(is_gzip_file(dir.file("t.json.gz")));
  EXPECT_FALSE(is_gzip_file(dir.file("t.json")));
  TraceReadResult plain, gz;
  const std::vector<TraceEvent> a = read_all(dir.file("t.json"), &plain);
  const std::vector<TraceEvent> b = read_all(dir.file("t.json.gz"), &gz);
  ASSERT_TRUE(gz.complete) << gz.error;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].ts, b[i].ts);
    EXPECT_EQ(a[i].begin_offset, b[i].begin_offset);  // offsets into the text
  }
  EXPECT_EQ(gz.bytes, plain.bytes);

  const std::string compressed = gzip_of(text);
  for (size_t cut = compressed.size() / 37; cut < compressed.size();
       cut += compressed.size() / 37) {
    write_file(dir.file("cut.json.gz"), compressed.substr(0, cut));
    TraceReadResult r;
    const std::vector<TraceEvent> got = read_all(dir.file("cut.json.gz"), &r);
    EXPECT_FALSE(r.complete) << cut;
    EXPECT_TRUE(r.truncated) << cut << ": " << r.error;
    EXPECT_NE(r.error.find("gzip stream is cut short"), std::string::npos) << r.error;
    EXPECT_LE(got.size(), a.size());
  }
  std::string corrupt = compressed;
  for (size_t i = corrupt.size() / 2; i < corrupt.size() / 2 + 64; ++i) corrupt[i] = '\x55';
  write_file(dir.file("bad.json.gz"), corrupt);
  TraceReadResult r;
  read_all(dir.file("bad.json.gz"), &r);
  EXPECT_FALSE(r.complete);
  EXPECT_NE(r.error.find("gzip"), std::string::npos) << r.error;
}

// `check --repair` of a gzip trace cut short (killed mid-write, copied mid-write): a complete
// gzip trace with every complete event, in place or into another file.
TEST(TraceFormat, RepairsACutGzipTrace) {
  TempDir dir;
  write_run(dir.file("t.json"), 6);
  const std::string text = test::file_text(dir.file("t.json"));
  const std::string compressed = gzip_of(text);
  for (const bool in_place : {true, false}) {
    const std::string cut = dir.file("cut.json.gz");
    write_file(cut, compressed.substr(0, compressed.size() * 2 / 3));
    TraceReadResult read;
    TraceChecker before = check(cut, &read);
    EXPECT_FALSE(before.ok());
    ASSERT_TRUE(read.truncated) << read.error;
    const RepairPlan plan = plan_repair(read, before.open_slices(), before.max_ts(), read.bytes);
    ASSERT_TRUE(plan.needed);
    const std::string out = in_place ? cut : dir.file("repaired.json.gz");
    std::string error;
    ASSERT_TRUE(apply_repair(cut, out, plan, &error)) << error;
    EXPECT_TRUE(is_gzip_file(out));
    bool complete = false;
    const std::string repaired = test::file_text(out, &complete);
    EXPECT_TRUE(complete);
    EXPECT_EQ(repaired.substr(0, plan.keep_bytes), text.substr(0, plan.keep_bytes));
    TraceReadResult reread;
    const TraceChecker after = check(out, &reread);
    EXPECT_TRUE(after.ok()) << messages(after);
    EXPECT_TRUE(reread.complete) << reread.error;
    EXPECT_EQ(reread.events, plan.events_kept + plan.closed_slices);
    EXPECT_FALSE(std::filesystem::exists(cut + ".repair.tmp"));
  }
}

// Every file of a size budget's rotation passes `check` on its own, and the files read in order
// summarise as the same run written into one file.
TEST(TraceFormat, RotatedFilesCheckAloneAndSummariseAsOneRun) {
  TempDir dir;
  for (const char* name : {"r.json", "g.json.gz"}) {
    const std::string rotated = dir.file(name);
    const uint64_t files = write_run(rotated, 24, rotated.back() == 'z' ? 6 << 10 : 48 << 10);
    ASSERT_GE(files, 3u) << name;
    write_run(dir.file("whole.json"), 24);
    TraceSummarizer whole, parts;
    read_trace_file(dir.file("whole.json"), [&](const TraceEvent& e) {
      whole.add(e);
      return true;
    });
    for (uint64_t i = 0; i < files; ++i) {
      const std::string path = rotated_path(rotated, i);
      const TraceChecker checker = check(path);
      EXPECT_TRUE(checker.ok()) << path << "\n" << messages(checker);
      EXPECT_TRUE(checker.has_run_end()) << path;
      read_trace_file(path, [&](const TraceEvent& e) {
        parts.add(e);
        return true;
      });
    }
    const Summary a = whole.finish(), b = parts.finish();
    EXPECT_EQ(a.negotiations, b.negotiations) << name;
    ASSERT_EQ(a.lateness.size(), b.lateness.size());
    for (size_t r = 0; r < a.lateness.size(); ++r) {
      EXPECT_EQ(a.lateness[r].negotiations, b.lateness[r].negotiations);
      EXPECT_DOUBLE_EQ(a.lateness[r].mean_lag_us, b.lateness[r].mean_lag_us);
      EXPECT_EQ(a.lateness[r].times_last, b.lateness[r].times_last);
    }
    ASSERT_EQ(a.phases.size(), b.phases.size());
    for (size_t i = 0; i < a.phases.size(); ++i) {
      EXPECT_EQ(a.phases[i].phase, b.phases[i].phase);
      EXPECT_EQ(a.phases[i].count, b.phases[i].count) << a.phases[i].phase;
      EXPECT_NEAR(a.phases[i].total_us, b.phases[i].total_us, 1e-6) << a.phases[i].phase;
    }
    ASSERT_EQ(a.fusion.size(), b.fusion.size());
    for (size_t i = 0; i < a.fusion.size(); ++i) {
      EXPECT_EQ(a.fusion[i].batches, b.fusion[i].batches);
      EXPECT_EQ(a.fusion[i].tensors, b.fusion[i].tensors);
      EXPECT_EQ(a.fusion[i].bytes, b.fusion[i].bytes);
    }
  }
}

}  // namespace
}  // namespace ranktime::timeline
