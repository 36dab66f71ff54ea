// TraceWriter: producers push Records into a preallocated buffer; a thread of the writer's own
// swaps it out, formats it (EventFormatter) and appends it to the file (TraceFile, plain or gzip)
// in pieces, each one write that leaves the file a complete JSON array. With a size budget, a
// file about to pass it is completed and the next numbered file opened (rotation).
//
// The writer prefers cores that would otherwise be idle. A second thread, the idle detector,
// runs at SCHED_IDLE priority and holds no lock: asked through a futex, it runs only when a core
// has nothing else to do, and then tells the writer so. The writer writes one piece per such
// signal, and everything at once, as a writer at normal priority must, once the buffer is half
// full, records are a flush interval old, or on flush() and close(). (A writer that itself ran
// at SCHED_IDLE priority could be preempted while holding a lock for seconds on a machine with
// no idle core: see docs/benchmarks.md.)
#include "ranktime/timeline/trace_writer.h"

#include <fcntl.h>
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

#include "event_formatter.h"
#include "idle_detector.h"
#include "open_writers.h"
#include "trace_file.h"

namespace ranktime::timeline {

namespace {

using Clock = std::chrono::steady_clock;

// A large batch is written in pieces of about this size, each one pwrite leaving a complete
// array: memory stays bounded whatever the buffer capacity. Small enough that the text is still
// in cache when the kernel copies it into the page cache: trace_writer_bench's burst row, run
// alternately, 10.2-10.4 M events/s at 512 KiB, 6.7-7.2 M at 4 MiB.
constexpr size_t kMaxChunkBytes = size_t{512} << 10;
// What the writer writes per signal of an idle core: a fraction of a millisecond of work.
constexpr size_t kIdleChunkBytes = size_t{128} << 10;
// A signal of the idle detector can be missed (it notifies without the writer's mutex, which it
// must never hold): the writer, while waiting for one, looks again this often.
constexpr std::chrono::milliseconds kIdleSignalRecheck{20};

std::string errno_message(int error) { return std::generic_category().message(error); }

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The base name of a path (what a file's closing metadata calls the next file).
std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

struct TraceWriter::Impl {
  // Members of Impl, not of the anonymous namespace: Impl has external linkage, and a member of
  // a type local to this file would be warned about in a unity build (-Wsubobject-linkage).
  struct FreeDeleter {
    void operator()(Record* records) const { std::free(records); }
  };
  // Raw storage, filled with memcpy (Record is trivially copyable): pages are only touched as the
  // buffer fills, so a large capacity costs address space, not resident memory.
  using RecordBuffer = std::unique_ptr<Record[], FreeDeleter>;

  Impl(const TraceWriterOptions& opts, const RunMetadata& run, const StringTable& strings)
      : options(opts),
        capacity(opts.capacity_records > 0 ? opts.capacity_records : 1),
        wake_threshold(std::max<size_t>(capacity / 2, 1)),
        idle_threshold(std::max<size_t>(capacity / 8, 1)),
        // Bounded so that `now + flush_interval` cannot overflow.
        flush_interval(
            std::min<std::chrono::milliseconds>(opts.flush_interval, std::chrono::hours(24))),
        quiet(opts.quiet_flush.count() > 0 && opts.quiet_flush < flush_interval),
        gzip(ends_with(opts.path, ".gz")),
        metadata(run),
        // The closing metadata's size, at most: fixed text, two numbers per rank, the next name.
        closing_reserve(512 + 64 * run.clock_offsets_us.size() + opts.path.size()),
        clock_offsets_us(run.clock_offsets_us),
        clock_uncertainty_us(run.clock_uncertainty_us),
        formatter(strings, run.start_ns),
        owner_pid(::getpid()) {}

  bool push(const Record* records, size_t n, size_t* accepted);
  void flush();
  void close();
  void run();
  // Writer thread: writes up to about `max_bytes` of the batch in `back`, first taking the
  // records in `front` as the next batch if `back` is all written.
  void write_piece(size_t max_bytes);
  void take_batch();
  void finish_batch();
  void ask_for_an_idle_core();
  // Opens file `index` of the rotation and writes its first events (run metadata at `at_ns`).
  bool open_file(uint64_t index, int64_t at_ns, int* error);
  // Writes `chunk` (holding `events` events) to the file; with `last`, followed by the closing
  // metadata (naming `next_file`, if any) that completes the file.
  bool write_chunk(size_t events, bool last, const std::string& next_file);
  // Whether the file, with `chunk` written, would pass the size budget.
  bool over_budget() const;
  // Completes the file with `chunk` and goes on in the next one of the rotation.
  bool rotate(size_t events);
  std::vector<double> clock_offsets(std::vector<double>* uncertainty);
  void fail(int error);
  bool batch_left() const { return back_next < back_size; }  // writer thread
  bool urgent() const {
    return closing || flush_requests > flushes_done || front_size >= wake_threshold;
  }

  const TraceWriterOptions options;
  const size_t capacity;
  const size_t wake_threshold;  // the writer writes everything once the buffer is this full
  const size_t idle_threshold;  // on idle cores, it starts once the buffer is this full
  const std::chrono::milliseconds flush_interval;
  const bool quiet;  // options.quiet_flush applies
  const bool gzip;
  const RunMetadata metadata;
  const uint64_t closing_reserve;

  // Producer side, guarded by `mutex`.
  std::mutex mutex;
  const std::shared_ptr<WakeSignals> signals = std::make_shared<WakeSignals>();
  std::condition_variable& wake = signals->wake;
  std::condition_variable flushed;  // flush() waits on it
  RecordBuffer front;               // producers fill it
  size_t front_size = 0;
  Clock::time_point front_since;  // when `front` got its first record
  Clock::time_point last_push;    // when a record was last accepted
  bool closing = false;           // close() began: no more records are accepted
  bool failed = false;            // an I/O error happened: records are dropped
  bool stopped = false;           // the writer thread is done
  uint64_t flush_requests = 0;
  uint64_t flushes_done = 0;  // flush requests whose records are on disk

  std::atomic<uint64_t> dropped{0};
  std::atomic<uint64_t> regions_dropped{0};
  std::atomic<uint64_t> events_written{0};
  std::atomic<uint64_t> files_opened{0};

  std::mutex clock_mutex;
  std::vector<double> clock_offsets_us;
  std::vector<double> clock_uncertainty_us;

  std::atomic<bool>& idle_seen = signals->idle_seen;  // the detector holds no lock

  // Writer thread only (and open(), before the thread starts).
  RecordBuffer back;  // the batch being written
  size_t back_size = 0;
  size_t back_next = 0;          // back[back_next..back_size) are not written yet
  Clock::time_point back_since;  // its oldest record was pushed no earlier than this
  uint64_t back_covers = 0;      // flush requests made before the batch was taken
  bool back_last = false;        // the batch was taken after close(): the run end follows it
  EventFormatter formatter;
  TextBuffer chunk;
  std::unique_ptr<TraceFile> file;
  uint64_t file_index = 0;          // of the rotation
  uint64_t file_events = 0;         // events in the file so far
  uint64_t file_header_events = 0;  // of which its first (run metadata)
  std::string file_path;
  int open_error = 0;  // errno of a failed header write, reported by the thread
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
      last_push = Clock::now();
      if (before == 0) front_since = last_push;
      // Wake the writer to start its timers, or when the buffer passes a threshold; not per
      // record.
      notify = before == 0 || (before < idle_threshold && front_size >= idle_threshold) ||
               (before < wake_threshold && front_size >= wake_threshold);
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
    file.reset();
    closed = true;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    closing = true;
  }
  wake.notify_one();
  if (std::this_thread::get_id() == thread_id) return;  // from on_error: finishes on its own
  thread.join();  // it tells the idle detector to quit, which it does whenever it next runs
  file.reset();
  closed = true;
}

void TraceWriter::Impl::run() {
  if (options.use_idle_cores) {
    // No wake-up preemption: a piece the writer wakes up for waits for a core to come free
    // instead of taking one from a rank, at the same weight as a normal thread (no starvation,
    // so no thread waiting on its mutex waits long). Small-tensor steps, 22 rotated rounds:
    // faster than SCHED_OTHER in 16 (docs/benchmarks.md).
    set_own_policy(SCHED_BATCH);
  }
  std::unique_lock<std::mutex> lock(mutex);
  if (open_error != 0) {
    lock.unlock();
    fail(open_error);
    lock.lock();
  }
  while (!stopped) {
    const Clock::time_point now = Clock::now();
    if (!batch_left() && front_size == 0 && !urgent()) {
      // Nothing to write: sleep without a timeout, so an idle writer costs no CPU.
      wake.wait(lock);
      continue;
    }
    const Clock::time_point oldest = batch_left() ? back_since : front_since;
    const bool quiet_due = quiet && front_size > 0 && now >= last_push + options.quiet_flush;
    if (urgent() || now >= oldest + flush_interval || quiet_due) {
      // Due: everything now, on whatever core (the age, memory and flush bounds).
      lock.unlock();
      do {
        write_piece(kMaxChunkBytes);
      } while (batch_left());
      lock.lock();
      continue;
    }
    const bool worth_writing =
        batch_left() || front_size >= idle_threshold || now >= front_since + flush_interval / 2;
    if (worth_writing && options.use_idle_cores && idle_seen.exchange(false)) {
      lock.unlock();
      write_piece(kIdleChunkBytes);
      lock.lock();
      continue;
    }
    Clock::time_point until = oldest + flush_interval;
    if (quiet && front_size > 0) until = std::min(until, last_push + options.quiet_flush);
    if (worth_writing && options.use_idle_cores) {
      ask_for_an_idle_core();
      until = std::min(until, now + kIdleSignalRecheck);
    } else if (!worth_writing) {
      until = std::min(until, front_since + flush_interval / 2);
    }
    wake.wait_until(lock, until, [&] {
      return urgent() || (worth_writing ? idle_seen.load() : front_size >= idle_threshold);
    });
  }
  lock.unlock();
  signals->stop_detector();
}

void TraceWriter::Impl::ask_for_an_idle_core() { signals->ask_for_an_idle_core(); }

void TraceWriter::Impl::take_batch() {
  std::lock_guard<std::mutex> lock(mutex);
  std::swap(front, back);
  back_size = front_size;
  back_next = 0;
  front_size = 0;
  back_covers = flush_requests;
  back_last = closing;
  back_since = front_since;
}

void TraceWriter::Impl::finish_batch() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    flushes_done = back_covers;
    stopped = back_last;
  }
  flushed.notify_all();
}

void TraceWriter::Impl::write_piece(size_t max_bytes) {
  if (!batch_left()) take_batch();
  const size_t from = back_next;
  chunk.clear();
  size_t events = 0;
  bool full = false;
  while (!reported_error && batch_left() && chunk.size() < max_bytes && !full) {
    events += formatter.append_record(back[back_next++], &chunk);
    full = options.max_bytes > 0 && over_budget();
  }
  bool ok = !reported_error;
  if (ok && full) {
    ok = rotate(events);
    events = 0;
  }
  if (ok && !batch_left() && back_last) {
    ok = write_chunk(events, true, "");
  } else if (ok && !chunk.empty()) {
    ok = write_chunk(events, false, "");
  }
  if (!ok) {
    // Dropped: the rest of the batch from this piece on (nothing reaches the file any more).
    dropped.fetch_add(back_size - from, std::memory_order_relaxed);
    back_next = back_size;
  }
  if (!batch_left()) finish_batch();
}

std::vector<double> TraceWriter::Impl::clock_offsets(std::vector<double>* uncertainty) {
  std::lock_guard<std::mutex> lock(clock_mutex);
  *uncertainty = clock_uncertainty_us;
  return clock_offsets_us;
}

bool TraceWriter::Impl::write_chunk(size_t events, bool last, const std::string& next_file) {
  if (last) {
    RunEnd end;
    end.clock_offsets_us = clock_offsets(&end.clock_uncertainty_us);
    // events_written counts every event in the file, this one included: the array's length.
    end.events_written = file_events + events + 1;
    end.events_dropped = dropped.load(std::memory_order_relaxed);
    end.regions_dropped = regions_dropped.load(std::memory_order_relaxed);
    end.next_file = next_file;
    events += formatter.append_run_end(end, &chunk);
  }
  int error = 0;
  const bool written =
      last ? file->finish(chunk.view(), &error) : file->append(chunk.view(), &error);
  if (!written) {
    fail(error);
    return false;
  }
  file_events += events;
  events_written.fetch_add(events, std::memory_order_relaxed);
  return true;
}

bool TraceWriter::Impl::over_budget() const {
  // A file holds at least one record besides its run metadata, however small the budget.
  return (!chunk.empty() || file_events > file_header_events) &&
         file->size() + file->estimate(chunk.size()) + closing_reserve > options.max_bytes;
}

bool TraceWriter::Impl::rotate(size_t events) {
  const std::string next = rotated_path(options.path, file_index + 1);
  if (!write_chunk(events, true, base_name(next))) return false;
  int error = 0;
  if (!open_file(file_index + 1, formatter.latest_ns(), &error)) {
    fail(error);
    return false;
  }
  if (options.keep_files > 0 && file_index >= options.keep_files) {
    ::unlink(rotated_path(options.path, file_index - options.keep_files).c_str());
  }
  return true;
}

bool TraceWriter::Impl::open_file(uint64_t index, int64_t at_ns, int* error) {
  file_index = index;
  file_path = rotated_path(options.path, index);
  file_events = 0;
  file = TraceFile::create(file_path, gzip, options.gzip_level, error);
  if (!file) return false;
  files_opened.fetch_add(1, std::memory_order_relaxed);
  formatter.start_file();
  RunMetadata m = metadata;
  m.clock_offsets_us = clock_offsets(&m.clock_uncertainty_us);
  chunk.clear();
  const size_t events = formatter.append_run_metadata(m, at_ns, index, &chunk);
  chunk.data()[0] = '[';  // the file's first separator opens the array
  const bool written = file->append(chunk.view(), error);
  chunk.clear();
  if (!written) return false;
  file_events = file_header_events = events;
  events_written.fetch_add(events, std::memory_order_relaxed);
  return true;
}

void TraceWriter::Impl::fail(int error) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    failed = true;
  }
  reported_error = true;
  if (options.on_error) {
    options.on_error("timeline: cannot write " + file_path + ": " + errno_message(error) +
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
  // The header is on disk before open() returns: the file is a complete array from the start.
  int open_error = 0;
  if (!impl->open_file(0, metadata.start_ns, &open_error)) {
    if (!impl->file) {
      if (error)
        *error = "timeline: cannot create " + options.path + ": " + errno_message(open_error);
      return nullptr;
    }
    impl->open_error = open_error;
    impl->failed = true;  // the thread reports it through on_error, as for any write error
  }
  // A set of files is one run's: numbered files of an earlier rotation go.
  for (uint64_t index = 1; ::unlink(rotated_path(options.path, index).c_str()) == 0; ++index) {
  }
  Impl* raw = impl.get();
  {
    // run() starts by taking the mutex: it and on_error see `thread_id` set.
    std::lock_guard<std::mutex> lock(raw->mutex);
    raw->thread = std::thread([raw] { raw->run(); });
    raw->thread_id = raw->thread.get_id();
    if (options.use_idle_cores) {
      std::thread([signals = raw->signals] { run_idle_detector(signals); }).detach();
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

void TraceWriter::set_regions_dropped(uint64_t regions) {
  impl_->regions_dropped.store(regions, std::memory_order_relaxed);
}

uint64_t TraceWriter::dropped() const { return impl_->dropped.load(std::memory_order_relaxed); }

uint64_t TraceWriter::events_written() const {
  return impl_->events_written.load(std::memory_order_relaxed);
}

const std::string& TraceWriter::path() const { return impl_->options.path; }

uint64_t TraceWriter::files_opened() const {
  return impl_->files_opened.load(std::memory_order_relaxed);
}

namespace detail {

void close_writer(TraceWriter::Impl* writer) { writer->close(); }

}  // namespace detail

}  // namespace ranktime::timeline
