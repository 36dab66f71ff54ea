// `ranktime check --repair`: completes a file cut short from what the checker found open (keep
// every complete event, close the open slices, close the array), plain or gzip.
#include "ranktime/timeline/trace_repair.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include <unistd.h>

#include "check_values.h"
#include "gzip_input.h"
#include "trace_file.h"

namespace ranktime::timeline {

RepairPlan plan_repair(const TraceReadResult& read, const std::vector<OpenSliceInfo>& open,
                       double close_ts, uint64_t file_size) {
  RepairPlan plan;
  plan.events_kept = read.events;
  if (read.complete && open.empty()) {
    plan.keep_bytes = file_size;  // applying it copies the file as it is
    return plan;
  }
  plan.needed = true;
  if (read.events == 0) {
    plan.keep_bytes = read.array_begin;  // 0 when there is no '[' either
    plan.tail = read.array_begin > 0 ? "\n]\n" : "[\n]\n";
  } else {
    plan.keep_bytes = read.last_event_end;
    // A negotiation whose ticks the cut took is dropped, with what follows it.
    for (const OpenSliceInfo& slice : open) {
      if (slice.incomplete && slice.offset < plan.keep_bytes) {
        plan.keep_bytes = slice.offset;
        plan.events_kept = slice.event_index;
      }
    }
    // Close inner slices before outer ones: walk each thread's stack from the top.
    std::vector<OpenSliceInfo> closing;
    for (const OpenSliceInfo& slice : open) {
      if (!slice.incomplete && slice.offset < plan.keep_bytes) closing.push_back(slice);
    }
    std::stable_sort(closing.begin(), closing.end(),
                     [](const OpenSliceInfo& a, const OpenSliceInfo& b) {
                       if (a.pid != b.pid) return a.pid < b.pid;
                       if (a.tid != b.tid) return a.tid < b.tid;
                       return a.depth > b.depth;
                     });
    for (const OpenSliceInfo& slice : closing) {
      nlohmann::json event = {{"name", slice.name}, {"ph", "E"}, {"pid", slice.pid},
                              {"tid", slice.tid},   {"ts", 0},   {"args", {{"repaired", true}}}};
      std::string text = event.dump();
      // nlohmann orders keys; put the timestamp in with three decimals, as the writer does.
      const std::string placeholder = "\"ts\":0";
      text.replace(text.find(placeholder), placeholder.size(),
                   "\"ts\":" + format_ts(std::max(close_ts, slice.ts)));
      plan.tail += ",\n" + text;
      ++plan.closed_slices;
    }
    plan.tail += "\n]\n";
  }
  plan.bytes_dropped = file_size > plan.keep_bytes ? file_size - plan.keep_bytes : 0;
  return plan;
}

namespace {

// A gzip trace's repair: its text up to `plan.keep_bytes`, then the tail, compressed into a new
// file (a temporary one renamed over the input when repairing in place).
bool apply_gzip_repair(const std::string& in_path, const std::string& out_path,
                       const RepairPlan& plan, std::string* error) {
  auto fail = [&](const std::string& what, const std::string& path, int code) {
    if (error) *error = what + " " + path + ": " + std::strerror(code);
    return false;
  };
  std::ifstream in(in_path, std::ios::binary);
  if (!in) return fail("cannot open", in_path, errno);
  InflatingBuffer inflating(in.rdbuf());
  const std::string target = out_path == in_path ? in_path + ".repair.tmp" : out_path;
  int code = 0;
  std::unique_ptr<TraceFile> out =
      TraceFile::create(target, /*gzip=*/true, /*gzip_level=*/1, &code);
  if (!out) return fail("cannot create", target, code);
  std::vector<char> buffer(size_t{1} << 20);
  uint64_t left = plan.keep_bytes;
  while (left > 0) {
    const auto want = static_cast<std::streamsize>(std::min<uint64_t>(left, buffer.size()));
    const std::streamsize got = inflating.sgetn(buffer.data(), want);
    if (got <= 0) return fail("cannot read", in_path, EIO);
    if (!out->append(std::string_view(buffer.data(), static_cast<size_t>(got)), &code)) {
      return fail("cannot write", target, code);
    }
    left -= static_cast<uint64_t>(got);
  }
  // The file adds the closing bracket that ends the plan's tail.
  std::string_view tail = plan.tail;
  if (tail.size() >= TraceFile::kClosing.size() &&
      tail.substr(tail.size() - TraceFile::kClosing.size()) == TraceFile::kClosing) {
    tail.remove_suffix(TraceFile::kClosing.size());
  }
  if (!out->finish(tail, &code)) return fail("cannot write", target, code);
  out.reset();
  if (target != out_path && std::rename(target.c_str(), out_path.c_str()) != 0) {
    return fail("cannot replace", out_path, errno);
  }
  return true;
}

}  // namespace

bool apply_repair(const std::string& in_path, const std::string& out_path, const RepairPlan& plan,
                  std::string* error) {
  if (is_gzip_file(in_path)) return apply_gzip_repair(in_path, out_path, plan, error);
  auto fail = [&](const std::string& what, const std::string& path) {
    if (error) *error = what + " " + path + ": " + std::strerror(errno);
    return false;
  };
  if (out_path == in_path) {
    if (::truncate(in_path.c_str(), static_cast<off_t>(plan.keep_bytes)) != 0) {
      return fail("cannot truncate", in_path);
    }
    std::ofstream out(in_path, std::ios::binary | std::ios::app);
    if (!out) return fail("cannot open", in_path);
    out << plan.tail;
    out.flush();
    if (!out) return fail("cannot write", in_path);
    return true;
  }
  std::ifstream in(in_path, std::ios::binary);
  if (!in) return fail("cannot open", in_path);
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) return fail("cannot create", out_path);
  std::vector<char> buffer(size_t{1} << 20);
  uint64_t left = plan.keep_bytes;
  while (left > 0) {
    auto chunk = static_cast<std::streamsize>(std::min<uint64_t>(left, buffer.size()));
    in.read(buffer.data(), chunk);
    if (in.gcount() != chunk) return fail("cannot read", in_path);
    out.write(buffer.data(), chunk);
    left -= static_cast<uint64_t>(chunk);
  }
  out << plan.tail;
  out.flush();
  if (!out) return fail("cannot write", out_path);
  return true;
}

}  // namespace ranktime::timeline
