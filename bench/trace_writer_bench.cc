// TraceWriter throughput: a producer thread pushes a realistic record mix (negotiations with
// per-rank ticks, operation slices with sub-phase spans) and the writer formats and writes it;
// once as one record per event, once as the runtime records it (a negotiation in one record, a
// fused batch as a header, its sub-phases and one record per tensor).
// Reports events/s end to end (first push -> close() done), bytes per event and ns per push(),
// for plain text and gzip (a path ending in .gz); then where the writer's time goes for the
// runtime's records: formatting, compressing, writing, each timed alone.
//
//   trace_writer_bench [records (default 5000000)] [path (default /tmp/ranktime_bench.json)]
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "deflate_stream.h"
#include "event_formatter.h"
#include "ranktime/timeline/record.h"
#include "ranktime/timeline/string_table.h"
#include "ranktime/timeline/trace_writer.h"
#include "text_buffer.h"

namespace rt = ranktime::timeline;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRanks = 4;
constexpr int kTensors = 100;
constexpr int kTensorsPerBatch = 10;     // compact records: fused batches of this many
constexpr int64_t kStepNs = 10'000'000;  // one training step every 10 ms

rt::OpArgs conv_args() {
  rt::OpArgs op{};
  op.dtype = 6;
  op.ndim = 4;
  op.fused_tensors = 12;
  op.bytes = 4 * 256 * 256 * 3 * 3;
  op.dims[0] = 256;
  op.dims[1] = 256;
  op.dims[2] = 3;
  op.dims[3] = 3;
  return op;
}

// Sub-phases of 3.333 us each from `*at` on, as records of `kind` on lane `rank`; advances *at.
void append_spans(rt::RecordKind kind, uint32_t tensor, int16_t rank, const rt::Phase* phases,
                  size_t n, int64_t* at, std::vector<rt::Record>* out) {
  for (size_t i = 0; i < n; ++i) {
    rt::Record span;
    span.tensor = tensor;
    span.rank = rank;
    span.kind = kind;
    span.phase = phases[i];
    span.ts_ns = *at;
    span.end_ns = *at + 3'333;
    *at = span.end_ns;
    out->push_back(span);
  }
}

const rt::Phase kSubPhases[] = {rt::Phase::kMemcpyInFusionBuffer, rt::Phase::kMpiAllreduce,
                                rt::Phase::kMemcpyOutFusionBuffer};

// The same step as the runtime records it: one kNegotiation per tensor; per rank, fused batches
// of kTensorsPerBatch (a kBatch, its kBatchSpans, a kBatchTensor per tensor).
std::vector<rt::Record> compact_step(const std::vector<uint32_t>& tensors) {
  std::vector<rt::Record> step;
  for (int t = 0; t < kTensors; ++t) {
    rt::Record r;
    r.tensor = tensors[t];
    r.ts_ns = 1000 * t;
    r.end_ns = r.ts_ns + 200;
    r.kind = rt::RecordKind::kNegotiation;
    r.phase = rt::Phase::kNegotiateAllreduce;
    r.args.negotiation.ticks = kRanks;
    for (int rank = 0; rank < kRanks; ++rank) {
      r.args.negotiation.rank[rank] = rank;
      r.args.negotiation.ready_ns[rank] = r.ts_ns + 37 * rank;
    }
    step.push_back(r);
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    for (int first = 0; first < kTensors; first += kTensorsPerBatch) {
      rt::Record header;
      header.rank = static_cast<int16_t>(rank);
      header.kind = rt::RecordKind::kBatch;
      header.phase = rt::Phase::kAllreduce;
      header.ts_ns = 200'000 + 20'000 * first + 1'234 * rank;
      header.args.batch.spans = sizeof(kSubPhases) / sizeof(kSubPhases[0]);
      header.args.batch.fused_tensors = kTensorsPerBatch;
      header.args.batch.start_ns = header.ts_ns + 3'333;
      int64_t at = header.args.batch.start_ns;
      std::vector<rt::Record> spans;
      append_spans(rt::RecordKind::kBatchSpan, 0, header.rank, kSubPhases,
                   sizeof(kSubPhases) / sizeof(kSubPhases[0]), &at, &spans);
      header.end_ns = at;
      step.push_back(header);
      step.insert(step.end(), spans.begin(), spans.end());
      for (int t = first; t < first + kTensorsPerBatch && t < kTensors; ++t) {
        rt::Record tensor;
        tensor.tensor = tensors[t];
        tensor.rank = header.rank;
        tensor.kind = rt::RecordKind::kBatchTensor;
        tensor.phase = rt::Phase::kAllreduce;
        tensor.args.op = conv_args();
        step.push_back(tensor);
      }
    }
  }
  return step;
}

// One training step's records, in the order rank 0's runtime produces them, as one record per
// event (`compact` false) or in the runtime's compact records.
std::vector<rt::Record> one_step(rt::StringTable& strings, bool compact) {
  std::vector<rt::Record> step;
  std::vector<uint32_t> tensors;
  for (int t = 0; t < kTensors; ++t) {
    tensors.push_back(strings.intern("layer" + std::to_string(t / 4) + "." + std::to_string(t % 4) +
                                     ".conv.weight"));
  }
  if (compact) return compact_step(tensors);
  for (int t = 0; t < kTensors; ++t) {
    rt::Record r;
    r.tensor = tensors[t];
    r.ts_ns = 1000 * t;
    r.kind = rt::RecordKind::kNegotiateBegin;
    r.phase = rt::Phase::kNegotiateAllreduce;
    step.push_back(r);
    for (int rank = 0; rank < kRanks; ++rank) {
      rt::Record tick = r;
      tick.kind = rt::RecordKind::kTick;
      tick.ts_ns = r.ts_ns + 37 * rank;
      tick.args.tick.rank = rank;
      tick.args.tick.lag_ns = 37 * rank;
      step.push_back(tick);
    }
    rt::Record end = r;
    end.kind = rt::RecordKind::kNegotiateEnd;
    end.ts_ns = r.ts_ns + 200;
    end.args.negotiate.last_rank = kRanks - 1;
    end.args.negotiate.spread_ns = 111;
    step.push_back(end);
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    for (int t = 0; t < kTensors; ++t) {
      const int64_t b = 200'000 + 20'000 * t + 1'234 * rank;
      rt::Record op;
      op.tensor = tensors[t];
      op.rank = static_cast<int16_t>(rank);
      op.ts_ns = b;
      op.kind = rt::RecordKind::kOpBegin;
      op.phase = rt::Phase::kAllreduce;
      op.args.op = conv_args();
      step.push_back(op);
      const rt::Phase phases[] = {rt::Phase::kQueue, rt::Phase::kMemcpyInFusionBuffer,
                                  rt::Phase::kMpiAllreduce, rt::Phase::kMemcpyOutFusionBuffer};
      int64_t at = b;
      append_spans(rt::RecordKind::kSpan, tensors[t], op.rank, phases,
                   sizeof(phases) / sizeof(phases[0]), &at, &step);
      rt::Record end = op;
      end.kind = rt::RecordKind::kOpEnd;
      end.ts_ns = at;
      step.push_back(end);
    }
  }
  return step;
}

struct Result {
  uint64_t records = 0;
  uint64_t events = 0;
  uint64_t dropped = 0;
  double push_ns = 0;  // producer loop time per record, push() included
  double seconds = 0;  // first push -> close() done
  double bytes_per_event = 0;
};

rt::RunMetadata bench_metadata() {
  rt::RunMetadata metadata;
  metadata.ranks = kRanks;
  metadata.hostnames.assign(kRanks, "bench-host");
  metadata.pids.assign(kRanks, 1);
  metadata.clock_offsets_us.assign(kRanks, 0.0);
  metadata.clock_uncertainty_us.assign(kRanks, 0.0);
  return metadata;
}

// Pushes `records` records; with `records_per_second` > 0 the producer is paced to that rate.
Result run(const std::string& path, size_t capacity, uint64_t records, double records_per_second,
           bool compact = false, int gzip_level = 1) {
  rt::StringTable strings;
  const std::vector<rt::Record> step = one_step(strings, compact);
  rt::TraceWriterOptions options;
  options.path = path;
  options.capacity_records = capacity;
  options.gzip_level = gzip_level;
  std::string error;
  auto writer = rt::TraceWriter::open(options, bench_metadata(), strings, &error);
  if (!writer) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }

  Result result;
  result.records = records;
  const Clock::time_point start = Clock::now();
  std::thread producer([&] {
    uint64_t pushed = 0;
    for (int64_t offset = 0; pushed < records; offset += kStepNs) {
      for (const rt::Record& templ : step) {
        if (pushed == records) break;
        rt::Record r = templ;
        r.ts_ns += offset;
        r.end_ns += offset;
        writer->push(r);
        ++pushed;
        if (records_per_second > 0 && pushed % 1024 == 0) {
          std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(
                                                    pushed * 1e9 / records_per_second)));
        }
      }
    }
    result.push_ns =
        std::chrono::duration<double, std::nano>(Clock::now() - start).count() / records;
  });
  producer.join();
  writer->close();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.events = writer->events_written();
  result.dropped = writer->dropped();
  struct stat st = {};
  stat(path.c_str(), &st);
  result.bytes_per_event = result.events ? static_cast<double>(st.st_size) / result.events : 0;
  return result;
}

// push() by itself: a warm buffer that never gets half full, so the writer stays asleep and the
// producer never waits for it.
double push_only_ns(const std::string& path) {
  rt::StringTable strings;
  const std::vector<rt::Record> step = one_step(strings, false);
  rt::TraceWriterOptions options;
  options.path = path;
  options.flush_interval = std::chrono::hours(1);
  options.quiet_flush = {};
  std::string error;
  auto writer = rt::TraceWriter::open(options, rt::RunMetadata{}, strings, &error);
  if (!writer) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  const size_t batch = options.capacity_records / 2 - 1;
  double best = 1e30;
  for (int round = 0; round < 6; ++round) {  // round 0 faults the pages in
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < batch; ++i) writer->push(step[i % step.size()]);
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    if (round > 0 && ns / batch < best) best = ns / batch;
    writer->flush();
  }
  return best;
}

// Where the writer's time goes, for `records` of the runtime's compact records: formatting
// them into 128 KiB pieces (the idle-core piece size), compressing the pieces as the gzip
// writer does (level 1, a sync flush per piece; zlib's level 1 alongside), and writing the text or
// the compressed bytes to `path` (one pwrite per piece); each timed alone, per JSON event.
void time_split(uint64_t records, const std::string& path) {
  rt::StringTable strings;
  const std::vector<rt::Record> step = one_step(strings, true);
  rt::EventFormatter formatter(strings, 0);
  constexpr size_t kPiece = size_t{128} << 10;
  rt::TextBuffer piece;  // reused, as the writer's is
  std::string text;
  text.reserve(records * 200);
  std::vector<std::string_view> pieces;
  uint64_t events = 0;
  double format_s = 0;
  Clock::time_point start = Clock::now();
  for (uint64_t pushed = 0, offset = 0; pushed < records; offset += kStepNs) {
    for (const rt::Record& templ : step) {
      if (pushed++ == records) break;
      rt::Record r = templ;
      r.ts_ns += offset;
      r.end_ns += offset;
      events += formatter.append_record(r, &piece);
      if (piece.size() >= kPiece || pushed == records) {
        format_s += std::chrono::duration<double>(Clock::now() - start).count();
        text.append(piece.view());  // kept for the next two timings, not timed
        piece.clear();
        start = Clock::now();
      }
    }
  }
  for (size_t at = 0; at < text.size(); at += kPiece) {
    pieces.push_back(std::string_view(text).substr(at, kPiece));
  }

  // The writer's deflate (ISA-L level 1, DeflateStream), and zlib's fastest level on the same
  // pieces for comparison (the writer's engine before 2026-11-28).
  std::vector<std::vector<char>> compressed(pieces.size());
  uint64_t compressed_bytes = 0;
  start = Clock::now();
  rt::DeflateStream deflater(1);
  for (size_t i = 0; i < pieces.size(); ++i) {
    size_t used = 0;
    deflater.compress(pieces[i], /*last=*/false, &compressed[i], &used);
    compressed[i].resize(used);
    compressed_bytes += used;
  }
  const double deflate_s = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<char> zlib_out;
  z_stream z{};
  deflateInit2(&z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
  uint64_t zlib_bytes = 0;
  start = Clock::now();
  for (std::string_view part : pieces) {
    zlib_out.resize(deflateBound(&z, part.size()) + 64);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(part.data()));
    z.avail_in = static_cast<uInt>(part.size());
    z.next_out = reinterpret_cast<Bytef*>(zlib_out.data());
    z.avail_out = static_cast<uInt>(zlib_out.size());
    deflate(&z, Z_SYNC_FLUSH);
    zlib_bytes += zlib_out.size() - z.avail_out;
  }
  const double zlib_s = std::chrono::duration<double>(Clock::now() - start).count();
  deflateEnd(&z);

  auto write_all = [&](const auto& parts) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const Clock::time_point begin = Clock::now();
    off_t at = 0;
    for (const auto& part : parts) {
      if (::pwrite(fd, part.data(), part.size(), at) < 0) std::perror("pwrite");
      at += static_cast<off_t>(part.size());
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    ::close(fd);
    std::remove(path.c_str());
    return seconds;
  };
  const double write_text_s = write_all(pieces);
  const double write_gzip_s = write_all(compressed);
  const double n = static_cast<double>(events);
  std::printf(
      "where the time goes, %llu compact records -> %llu events (%.1f text bytes, %.1f gzip "
      "bytes per event), one thread:\n  format %.1f ns/event, deflate %.1f ns/event (%.0f MB/s "
      "of text), write text %.1f ns/event, write gzip %.1f ns/event\n"
      "  zlib level 1 on the same pieces: %.1f ns/event, %.1f bytes per event; writer's deflate / "
      "zlib: time %.2f, bytes %.3f\n",
      static_cast<unsigned long long>(records), static_cast<unsigned long long>(events),
      static_cast<double>(text.size()) / n, static_cast<double>(compressed_bytes) / n,
      format_s * 1e9 / n, deflate_s * 1e9 / n, static_cast<double>(text.size()) / deflate_s / 1e6,
      write_text_s * 1e9 / n, write_gzip_s * 1e9 / n, zlib_s * 1e9 / n,
      static_cast<double>(zlib_bytes) / n, deflate_s / zlib_s,
      static_cast<double>(compressed_bytes) / static_cast<double>(zlib_bytes));
}

void print(const char* scenario, const Result& r, bool paced) {
  std::printf("%-34s %10llu %10llu %9llu %11.1f%s %12.0f %9.1f\n", scenario,
              static_cast<unsigned long long>(r.records), static_cast<unsigned long long>(r.events),
              static_cast<unsigned long long>(r.dropped), r.push_ns, paced ? "*" : " ",
              r.events / r.seconds, r.bytes_per_event);
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t records = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 5'000'000;
  const std::string path = argc > 2 ? argv[2] : "/tmp/ranktime_bench.json";
  const std::string gz = path + ".gz";
  const size_t default_capacity = rt::TraceWriterOptions{}.capacity_records;

  std::printf("%-34s %10s %10s %9s %12s %12s %9s\n", "scenario", "records", "events", "dropped",
              "ns/push", "events/s", "B/event");
  // Capacity for every record: nothing can drop, so this is the writer's own rate.
  print("burst, capacity = records", run(path, records, records, 0), false);
  // The records the runtime pushes (about 5 events each here): same writer, fewer records.
  print("burst, compact records", run(path, records / 5, records / 5, 0, true), false);
  // The same into gzip files, at the fastest level (the default) and at the slowest.
  print("burst, compact records, gzip -1", run(gz, records / 5, records / 5, 0, true, 1), false);
  print("burst, compact records, gzip -3", run(gz, records / 5, records / 5, 0, true, 3), false);
  // The default buffer against an unpaced producer: what a burst beyond it loses.
  const std::string burst_default = "burst, capacity = " + std::to_string(default_capacity);
  print(burst_default.c_str(), run(path, default_capacity, records, 0), false);
  // The default buffer with a producer paced at 1M records/s (~1.5M events/s).
  const std::string paced = "paced 1M rec/s, capacity = " + std::to_string(default_capacity);
  print(paced.c_str(), run(path, default_capacity, records, 1e6), true);
  std::printf("push() alone, warm buffer, writer asleep: %.1f ns/record (best of 5)\n",
              push_only_ns(path));
  std::printf(
      "ns/push: producer loop time per record, record copy included (* includes the "
      "pacing sleeps)\nevents/s: events in the file / (first push -> close() done); B/event: "
      "bytes on disk (compressed for gzip)\n");
  time_split(records / 5, path);
  std::remove(path.c_str());
  std::remove(gz.c_str());
  return 0;
}
