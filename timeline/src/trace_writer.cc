// TraceWriter: producers push Records into a preallocated buffer; a thread of the writer's own
// swaps it out, formats it (EventFormatter) and appends it to the file with one pwrite per flush,
// overwriting the closing bracket so the file is a complete JSON array after every flush.
#include "ranktime/timeline/trace_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include "event_formatter.h"
#include "open_writers.h"

namespace ranktime::timeline {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kClosing = "\n]\n";
// A large batch is written in pieces of about this size, each one pwrite leaving a complete
// array: memory stays bounded whatever the buffer capacity. Small enough that the text is still
// in cache when the kernel copies it into the page cache: trace_writer_bench's burst row, run
// alternately, 10.2-10.4 M events/s at 512 KiB, 6.7-7.2 M at 4 MiB.
constexpr size_t kMaxChunkBytes = size_t{512} << 10;

std::string errno_message(int error) { return std::generic_category().message(error); }

struct FreeDeleter {
  void operator()(Record* records) const { std::free(records); }
};
// Raw storage, filled with memcpy (Record is trivially copyable): pages are only touched as the
// buffer fills, so a large capacity costs address space, not resident memory.
using RecordBuffer = std::unique_ptr<Record[], FreeDeleter>;

}  // namespace

struct TraceWriter::Impl {
  Impl(const TraceWriterOptions& opts, const RunMetadata& metadata, const StringTable& strings)
      : options(opts),
        capacity(opts.capacity_records > 0 ? opts.capacity_records : 1),
        wake_threshold(capacity / 2 > 0 ? capacity / 2 : 1),
        // Bounded so that `now + flush_interval` cannot overflow.
        flush_interval(
            std::min<std::chrono::milliseconds>(opts.flush_interval, std::chrono::hours(24))),
        clock_offsets_us(metadata.clock_offsets_us),
        clock_uncertainty_us(metadata.clock_uncertainty_us),
        formatter(strings, metadata.start_ns),
        owner_pid(::getpid()) {}

  bool push(const Record* records, size_t n, size_t* accepted);
  void flush();
  void close();
  void run();
  void write_batch(const Record* records, size_t n, bool last);
  // Appends the closing bracket to `chunk` (holding `events` events) and writes it over the
  // file's current one.
  bool write_chunk(size_t events);
  // One pwrite (more only if the kernel writes short) of `text` at `offset`.
  bool write_at(int64_t offset, std::string_view text, int* error);
  void fail(int error);
  bool urgent() const {
    return closing || flush_requests > flushes_done || front_size >= wake_threshold;
  }

  const TraceWriterOptions options;
  const size_t capacity;
  const size_t wake_threshold;  // the writer is woken early once the buffer is this full
  const std::chrono::milliseconds flush_interval;
  int fd = -1;

  // Producer side, guarded by `mutex`.
  std::mutex mutex;
  std::condition_variable wake;     // the writer thread waits on it
  std::condition_variable flushed;  // flush() waits on it
  RecordBuffer front;               // producers fill it
  size_t front_size = 0;
  bool closing = false;  // close() began: no more records are accepted
  bool failed = false;   // an I/O error happened: records are dropped
  bool stopped = false;  // the writer thread is done
  uint64_t flush_requests = 0;
  uint64_t flushes_done = 0;  // flush requests whose records are on disk

  std::atomic<uint64_t> dropped{0};
  std::atomic<uint64_t> events_written{0};

  std::mutex clock_mutex;
  std::vector<double> clock_offsets_us;
  std::vector<double> clock_uncertainty_us;

  // Writer thread only (and open(), before the thread starts).
  RecordBuffer back;  // the batch being written
  EventFormatter formatter;
  std::string chunk;
  int64_t closing_offset = 0;  // file offset of the closing "\n]\n"
  int open_error = 0;          // errno of a failed header write, reported by the thread
  bool reported_error = false;

  std::thread thread;
  std::thread::id thread_id;  // of `thread`, which close() may join or detach meanwhile
  const pid_t owner_pid;      // a forked child must not join or write for its parent's writer
  std::mutex close_mutex;
  bool closed = false;
};

bool TraceWriter::Impl::push(const Record* records, size_t n, size_t* accepted) {
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    size_t room = closing || failed ? 0 : capacity - front_size;
    *accepted = n < room ? n : room;
    if (*accepted > 0) {
      const size_t before = front_size;
      std::memcpy(static_cast<void*>(front.get() + before), records, *accepted * sizeof(Record));
      front_size += *accepted;
      // Wake the writer to start its flush timer, or to write early once the buffer is half full;
      // not per record.
      notify = before == 0 || (before < wake_threshold && front_size >= wake_threshold);
    }
  }
  if (*accepted < n) dropped.fetch_add(n - *accepted, std::memory_order_relaxed);
  if (notify) wake.notify_one();
  return *accepted == n;
}

void TraceWriter::Impl::flush() {
  if (std::this_thread::get_id() == thread_id) return;  // from on_error: would deadlock
  if (::getpid() != owner_pid) return;                  // a forked child has no writer thread
  std::unique_lock<std::mutex> lock(mutex);
  if (stopped) return;
  const uint64_t request = ++flush_requests;
  wake.notify_one();
  flushed.wait(lock, [&] { return flushes_done >= request || stopped; });
}

void TraceWriter::Impl::close() {
  std::lock_guard<std::mutex> close_lock(close_mutex);
  if (closed) return;
  if (::getpid() != owner_pid) {
    // A forked child holds a copy of its parent's writer but not its thread; the file is the
    // parent's to finish.
    thread.detach();
    ::close(fd);
    closed = true;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    closing = true;
  }
  wake.notify_one();
  if (std::this_thread::get_id() == thread_id) return;  // from on_error: finishes on its own
  thread.join();
  ::close(fd);
  closed = true;
}

void TraceWriter::Impl::run() {
  std::unique_lock<std::mutex> lock(mutex);
  if (open_error != 0) {
    lock.unlock();
    fail(open_error);
    lock.lock();
  }
  // No record in `front` is older than this (the last swap, or when the writer saw it non-empty).
  Clock::time_point oldest = Clock::now();
  for (;;) {
    if (front_size == 0 && !urgent()) {
      // Nothing to write: sleep without a timeout, so an idle writer costs no CPU.
      wake.wait(lock, [&] { return front_size > 0 || urgent(); });
      oldest = Clock::now();
    }
    if (!urgent()) wake.wait_until(lock, oldest + flush_interval, [&] { return urgent(); });
    std::swap(front, back);
    const size_t n = front_size;
    front_size = 0;
    const uint64_t covered = flush_requests;
    const bool last = closing;
    oldest = Clock::now();
    lock.unlock();
    write_batch(back.get(), n, last);
    lock.lock();
    flushes_done = covered;
    if (last) {
      stopped = true;
      flushed.notify_all();
      return;
    }
    flushed.notify_all();
  }
}

void TraceWriter::Impl::write_batch(const Record* records, size_t n, bool last) {
  if (reported_error) {
    dropped.fetch_add(n, std::memory_order_relaxed);
    return;
  }
  chunk.clear();
  size_t events = 0;     // in `chunk`
  size_t unwritten = 0;  // records[unwritten..] are not on disk yet
  for (size_t i = 0; i < n; ++i) {
    events += formatter.append_record(records[i], &chunk);
    if (chunk.size() >= kMaxChunkBytes && i + 1 < n) {
      if (!write_chunk(events)) {
        dropped.fetch_add(n - unwritten, std::memory_order_relaxed);
        return;
      }
      unwritten = i + 1;
      events = 0;
      chunk.clear();
    }
  }
  if (last) {
    std::vector<double> offsets, uncertainty;
    {
      std::lock_guard<std::mutex> lock(clock_mutex);
      offsets = clock_offsets_us;
      uncertainty = clock_uncertainty_us;
    }
    // events_written counts every event in the file, this one included: the array's length.
    const uint64_t total = events_written.load(std::memory_order_relaxed) + events + 1;
    events += formatter.append_run_end(total, dropped.load(std::memory_order_relaxed), offsets,
                                       uncertainty, &chunk);
  }
  if (!chunk.empty() && !write_chunk(events)) {
    dropped.fetch_add(n - unwritten, std::memory_order_relaxed);
  }
}

bool TraceWriter::Impl::write_chunk(size_t events) {
  chunk.append(kClosing);
  int error = 0;
  if (!write_at(closing_offset, chunk, &error)) {
    fail(error);
    return false;
  }
  closing_offset += static_cast<int64_t>(chunk.size() - kClosing.size());
  events_written.fetch_add(events, std::memory_order_relaxed);
  return true;
}

bool TraceWriter::Impl::write_at(int64_t offset, std::string_view text, int* error) {
  while (!text.empty()) {
    const ssize_t written = ::pwrite(fd, text.data(), text.size(), offset);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      *error = written < 0 ? errno : EIO;
      return false;
    }
    text.remove_prefix(static_cast<size_t>(written));
    offset += written;
  }
  return true;
}

void TraceWriter::Impl::fail(int error) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    failed = true;
  }
  reported_error = true;
  if (options.on_error) {
    options.on_error("timeline: cannot write " + options.path + ": " + errno_message(error) +
                     "; recording stopped, further records are dropped");
  }
}

std::unique_ptr<TraceWriter> TraceWriter::open(const TraceWriterOptions& options,
                                               const RunMetadata& metadata,
                                               const StringTable& strings, std::string* error) {
  auto impl = std::make_unique<Impl>(options, metadata, strings);
  impl->front.reset(static_cast<Record*>(std::malloc(impl->capacity * sizeof(Record))));
  impl->back.reset(static_cast<Record*>(std::malloc(impl->capacity * sizeof(Record))));
  if (!impl->front || !impl->back) {
    if (error) {
      *error = "timeline: cannot allocate a buffer of " + std::to_string(impl->capacity) +
               " records for " + options.path;
    }
    return nullptr;
  }
  impl->fd = ::open(options.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (impl->fd < 0) {
    if (error) *error = "timeline: cannot create " + options.path + ": " + errno_message(errno);
    return nullptr;
  }
  // The header is on disk before open() returns: the file is a complete array from the start.
  const size_t events = impl->formatter.append_run_metadata(metadata, &impl->chunk);
  impl->chunk[0] = '[';
  impl->chunk.append(kClosing);
  if (impl->write_at(0, impl->chunk, &impl->open_error)) {
    impl->closing_offset = static_cast<int64_t>(impl->chunk.size() - kClosing.size());
    impl->events_written = events;
  } else {
    impl->failed = true;  // the thread reports it through on_error, as for any write error
  }
  Impl* raw = impl.get();
  {
    // run() starts by taking the mutex: it and on_error see `thread_id` set.
    std::lock_guard<std::mutex> lock(raw->mutex);
    raw->thread = std::thread([raw] { raw->run(); });
    raw->thread_id = raw->thread.get_id();
  }
  detail::register_open_writer(raw);
  return std::unique_ptr<TraceWriter>(new TraceWriter(std::move(impl)));
}

TraceWriter::TraceWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TraceWriter::~TraceWriter() {
  close();
  // In a forked child the copy's condition variables still count the parent's waiting writer
  // thread, and destroying them would wait for it forever: leave the copy alone.
  if (::getpid() != impl_->owner_pid) impl_.release();
}

bool TraceWriter::push(const Record& record) {
  size_t accepted = 0;
  return impl_->push(&record, 1, &accepted);
}

size_t TraceWriter::push(const Record* records, size_t n) {
  size_t accepted = 0;
  impl_->push(records, n, &accepted);
  return n - accepted;
}

void TraceWriter::set_clock_offsets(std::vector<double> offsets_us,
                                    std::vector<double> uncertainty_us) {
  std::lock_guard<std::mutex> lock(impl_->clock_mutex);
  impl_->clock_offsets_us = std::move(offsets_us);
  impl_->clock_uncertainty_us = std::move(uncertainty_us);
}

void TraceWriter::flush() { impl_->flush(); }

void TraceWriter::close() {
  // Close before unregistering: a signal flush running now either finds the writer registered
  // (and waits on the close) or finds it gone after the close is complete.
  impl_->close();
  detail::unregister_open_writer(impl_.get());
}

uint64_t TraceWriter::dropped() const { return impl_->dropped.load(std::memory_order_relaxed); }

uint64_t TraceWriter::events_written() const {
  return impl_->events_written.load(std::memory_order_relaxed);
}

const std::string& TraceWriter::path() const { return impl_->options.path; }

namespace detail {

void close_writer(TraceWriter::Impl* writer) { writer->close(); }

}  // namespace detail

}  // namespace ranktime::timeline
