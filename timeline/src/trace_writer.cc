// TraceWriter: producers push Records into a preallocated buffer; two threads of the writer's
// own swap it out, format it (EventFormatter) and append it to the file a piece at a time, each
// piece one pwrite overwriting the closing bracket, so the file is a complete JSON array after
// every piece.
//
// The background writer runs at SCHED_IDLE priority: it formats and writes only when a core
// would otherwise be idle, so training threads never wait for it. The urgent writer, at normal
// priority, sleeps until the background writer falls behind (the buffer half full, records older
// than the flush interval) or until a flush or the close, and then takes over: the file's age
// and drop bounds hold on a machine without idle time too. Whichever holds `role` writes the
// next piece, so the two never interleave text.
#include "ranktime/timeline/trace_writer.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
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
#include <utility>

#include "event_formatter.h"
#include "open_writers.h"

namespace ranktime::timeline {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kClosing = "\n]\n";
// The urgent writer writes a batch in pieces of about this size, each one pwrite leaving a
// complete array: memory stays bounded whatever the buffer capacity. Small enough that the text
// is still in cache when the kernel copies it into the page cache: trace_writer_bench's burst
// row, run alternately, 10.2-10.4 M events/s at 512 KiB, 6.7-7.2 M at 4 MiB.
constexpr size_t kMaxChunkBytes = size_t{512} << 10;
// The background writer's pieces are smaller: on a machine without idle time it may hold the
// role for a whole piece while it hardly runs, and the urgent writer waits for that piece.
constexpr size_t kBackgroundChunkBytes = size_t{128} << 10;

std::string errno_message(int error) { return std::generic_category().message(error); }

// Best effort: where SCHED_IDLE is not allowed, the background writer keeps normal priority.
void run_only_when_idle() {
  sched_param param{};
  param.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
}

struct FreeDeleter {
  void operator()(Record* records) const { std::free(records); }
};
// Raw storage, filled with memcpy (Record is trivially copyable): pages are only touched as the
// buffer fills, so a large capacity costs address space, not resident memory.
using RecordBuffer = std::unique_ptr<Record[], FreeDeleter>;

enum class Writer { kBackground, kUrgent };

}  // namespace

struct TraceWriter::Impl {
  Impl(const TraceWriterOptions& opts, const RunMetadata& metadata, const StringTable& strings)
      : options(opts),
        capacity(opts.capacity_records > 0 ? opts.capacity_records : 1),
        background_threshold(std::max<size_t>(capacity / 4, 1)),
        urgent_threshold(std::max<size_t>(capacity / 2, 1)),
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
  void run(Writer who);
  // With `mutex` held: whether `who` has something to write now; else when to look again
  // (Clock::time_point::max(): when woken).
  bool has_work(Writer who, Clock::time_point now, Clock::time_point* next_check) const;
  // With `role` held: writes up to about `max_bytes` of the batch in `back`, first taking the
  // records in `front` as the next batch if `back` is all written.
  void write_piece(size_t max_bytes);
  void take_batch();
  void finish_batch();
  // Appends the closing bracket to `chunk` (holding `events` events) and writes it over the
  // file's current one.
  bool write_chunk(size_t events);
  // One pwrite (more only if the kernel writes short) of `text` at `offset`.
  bool write_at(int64_t offset, std::string_view text, int* error);
  void fail(int error);
  bool is_writer_thread() const {
    const std::thread::id self = std::this_thread::get_id();
    return self == background_id || self == urgent_id;
  }

  const TraceWriterOptions options;
  const size_t capacity;
  const size_t background_threshold;  // the background writer starts early once this full
  const size_t urgent_threshold;      // the urgent writer takes over once this full
  const std::chrono::milliseconds flush_interval;
  int fd = -1;

  // Producer side, guarded by `mutex`.
  std::mutex mutex;
  std::condition_variable wake_background;
  std::condition_variable wake_urgent;
  std::condition_variable flushed;  // flush() waits on it
  RecordBuffer front;               // producers fill it
  size_t front_size = 0;
  Clock::time_point front_since;  // when `front` got its first record
  bool batch_pending = false;     // `back` holds records not written yet
  Clock::time_point batch_since;  // the oldest of them was pushed no earlier than this
  bool closing = false;           // close() began: no more records are accepted
  bool failed = false;            // an I/O error happened: records are dropped
  bool stopped = false;           // the closing metadata is written: the writers are done
  uint64_t flush_requests = 0;
  uint64_t flushes_done = 0;  // flush requests whose records are on disk

  std::atomic<uint64_t> dropped{0};
  std::atomic<uint64_t> events_written{0};

  std::mutex clock_mutex;
  std::vector<double> clock_offsets_us;
  std::vector<double> clock_uncertainty_us;

  // The writing role: guarded by `role` (and set up by open(), before the threads start).
  std::mutex role;
  RecordBuffer back;  // the batch being written
  size_t back_size = 0;
  size_t back_next = 0;      // back[back_next..back_size) are not written yet
  uint64_t back_covers = 0;  // flush requests made before the batch was taken
  bool back_last = false;    // the batch was taken after close(): the run end follows it
  bool finished = false;     // the run end is written
  EventFormatter formatter;
  std::string chunk;
  int64_t closing_offset = 0;  // file offset of the closing "\n]\n"
  int open_error = 0;          // errno of a failed header write, reported by a writer thread
  bool reported_error = false;

  std::thread background;
  std::thread urgent;
  // Of the threads, which close() may join or detach meanwhile.
  std::thread::id background_id;
  std::thread::id urgent_id;
  const pid_t owner_pid;  // a forked child must not join or write for its parent's writer
  std::mutex close_mutex;
  bool closed = false;
};

bool TraceWriter::Impl::push(const Record* records, size_t n, size_t* accepted) {
  bool notify_both = false, notify_background = false, notify_urgent = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    size_t room = closing || failed ? 0 : capacity - front_size;
    *accepted = n < room ? n : room;
    if (*accepted > 0) {
      const size_t before = front_size;
      std::memcpy(static_cast<void*>(front.get() + before), records, *accepted * sizeof(Record));
      front_size += *accepted;
      // Wake the writers to start their timers, or to write early once the buffer fills; not
      // per record.
      if (before == 0) {
        front_since = Clock::now();
        notify_both = true;
      }
      notify_background = before < background_threshold && front_size >= background_threshold;
      notify_urgent = before < urgent_threshold && front_size >= urgent_threshold;
    }
  }
  if (*accepted < n) dropped.fetch_add(n - *accepted, std::memory_order_relaxed);
  if (notify_both || notify_background) wake_background.notify_one();
  if (notify_both || notify_urgent) wake_urgent.notify_one();
  return *accepted == n;
}

void TraceWriter::Impl::flush() {
  if (is_writer_thread()) return;       // from on_error: would deadlock
  if (::getpid() != owner_pid) return;  // a forked child has no writer thread
  std::unique_lock<std::mutex> lock(mutex);
  if (stopped) return;
  const uint64_t request = ++flush_requests;
  wake_urgent.notify_one();
  flushed.wait(lock, [&] { return flushes_done >= request || stopped; });
}

void TraceWriter::Impl::close() {
  std::lock_guard<std::mutex> close_lock(close_mutex);
  if (closed) return;
  if (::getpid() != owner_pid) {
    // A forked child holds a copy of its parent's writer but not its threads; the file is the
    // parent's to finish.
    for (std::thread* t : {&background, &urgent}) {
      if (t->joinable()) t->detach();
    }
    ::close(fd);
    closed = true;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    closing = true;
  }
  wake_urgent.notify_one();
  wake_background.notify_one();
  if (is_writer_thread()) return;  // from on_error: the writers finish on their own
  for (std::thread* t : {&urgent, &background}) {
    if (t->joinable()) t->join();
  }
  ::close(fd);
  closed = true;
}

bool TraceWriter::Impl::has_work(Writer who, Clock::time_point now,
                                 Clock::time_point* next_check) const {
  *next_check = Clock::time_point::max();
  if (closing || flush_requests > flushes_done) return true;
  // The background writer writes a batch once its records have waited half the flush interval
  // (or the buffer is a quarter full) and goes on until it is written; the urgent writer steps in
  // only when records have waited the whole interval or the buffer is half full.
  const auto age_limit = who == Writer::kBackground ? flush_interval / 2 : flush_interval;
  if (batch_pending) {
    if (who == Writer::kBackground || now >= batch_since + flush_interval) return true;
    *next_check = batch_since + flush_interval;
  }
  if (front_size == 0) return false;
  if (front_size >= (who == Writer::kBackground ? background_threshold : urgent_threshold) ||
      now >= front_since + age_limit) {
    return true;
  }
  *next_check = std::min(*next_check, front_since + age_limit);
  return false;
}

void TraceWriter::Impl::run(Writer who) {
  if (who == Writer::kBackground) {
    run_only_when_idle();
  } else {
    std::lock_guard<std::mutex> role_lock(role);
    if (open_error != 0) fail(std::exchange(open_error, 0));  // reported at once, not at close
  }
  std::unique_lock<std::mutex> lock(mutex);
  std::condition_variable& wake = who == Writer::kBackground ? wake_background : wake_urgent;
  for (;;) {
    if (stopped) return;
    Clock::time_point next_check;
    if (has_work(who, Clock::now(), &next_check)) {
      lock.unlock();
      {
        std::lock_guard<std::mutex> role_lock(role);
        write_piece(who == Writer::kBackground ? kBackgroundChunkBytes : kMaxChunkBytes);
      }
      lock.lock();
    } else if (next_check == Clock::time_point::max()) {
      wake.wait(lock);  // nothing to write: no timeout, so an idle writer costs no CPU
    } else {
      wake.wait_until(lock, next_check);
    }
  }
}

void TraceWriter::Impl::take_batch() {
  std::lock_guard<std::mutex> lock(mutex);
  std::swap(front, back);
  back_size = front_size;
  back_next = 0;
  front_size = 0;
  back_covers = flush_requests;
  back_last = closing;
  batch_pending = back_size > 0;
  batch_since = front_since;
}

void TraceWriter::Impl::finish_batch() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    batch_pending = false;
    flushes_done = std::max(flushes_done, back_covers);
    stopped = back_last;
  }
  flushed.notify_all();
  if (back_last) {
    wake_background.notify_one();
    wake_urgent.notify_one();
  }
}

void TraceWriter::Impl::write_piece(size_t max_bytes) {
  if (finished) return;
  if (open_error != 0) fail(std::exchange(open_error, 0));
  if (back_next == back_size) take_batch();
  const size_t from = back_next;
  chunk.clear();
  size_t events = 0;
  if (reported_error) {
    back_next = back_size;  // nothing reaches the file any more
  } else {
    while (back_next < back_size && chunk.size() < max_bytes) {
      events += formatter.append_record(back[back_next++], &chunk);
    }
  }
  if (back_next == back_size && back_last && !reported_error) {
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
  if (reported_error || (!chunk.empty() && !write_chunk(events))) {
    // Dropped: this piece, and (write_chunk failed) the rest of the batch after it.
    dropped.fetch_add(back_size - from, std::memory_order_relaxed);
    back_next = back_size;
  }
  if (back_next == back_size) {
    finished = back_last;
    finish_batch();
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
    // run() starts by taking the mutex: it and on_error see the thread ids set.
    std::lock_guard<std::mutex> lock(raw->mutex);
    raw->urgent = std::thread([raw] { raw->run(Writer::kUrgent); });
    raw->urgent_id = raw->urgent.get_id();
    if (options.background_writer) {
      raw->background = std::thread([raw] { raw->run(Writer::kBackground); });
      raw->background_id = raw->background.get_id();
    }
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
