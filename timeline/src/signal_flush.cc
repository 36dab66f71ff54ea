// install_signal_flush(): on SIGINT or SIGTERM a watcher thread closes every open TraceWriter
// (drain, ranktime_run_end, closing bracket), then the signal takes its course. The handler only
// does async-signal-safe things: it posts a semaphore and chains to a previous handler function.
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "open_writers.h"

namespace ranktime::timeline {

namespace detail {

namespace {

struct OpenWriters {
  std::mutex mutex;  // held while the watcher closes writers, so none is destroyed meanwhile
  std::vector<TraceWriter::Impl*> writers;
};

// Leaked on purpose: writers may still close during static destruction.
OpenWriters& open_writers() {
  static auto* writers = new OpenWriters;
  return *writers;
}

}  // namespace

void register_open_writer(TraceWriter::Impl* writer) {
  OpenWriters& open = open_writers();
  std::lock_guard<std::mutex> lock(open.mutex);
  open.writers.push_back(writer);
}

void unregister_open_writer(TraceWriter::Impl* writer) {
  OpenWriters& open = open_writers();
  std::lock_guard<std::mutex> lock(open.mutex);
  open.writers.erase(std::remove(open.writers.begin(), open.writers.end(), writer),
                     open.writers.end());
}

}  // namespace detail

namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM};
constexpr int kNumSignals = sizeof(kSignals) / sizeof(kSignals[0]);

// Set by install_signal_flush() before its handler is installed; read by the handler.
struct sigaction g_previous[kNumSignals];
bool g_handled[kNumSignals];  // false: the signal was ignored and stays ignored
std::atomic<int> g_pending[kNumSignals];
std::atomic<bool> g_flushing{false};
std::atomic<int64_t> g_linger_ms{0};
sem_t g_wakeup;
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the signal handler may only touch lock-free atomics");

std::mutex g_install_mutex;
bool g_installed = false;

struct Callbacks {
  std::mutex mutex;
  int next_id = 1;
  std::vector<std::pair<int, std::function<void(int, bool)>>> list;
};
Callbacks& callbacks() {
  static auto* c = new Callbacks;  // leaked: may run during static destruction
  return *c;
}

int signal_index(int sig) {
  for (int i = 0; i < kNumSignals; ++i) {
    if (kSignals[i] == sig) return i;
  }
  return -1;
}

bool previous_is_function(int i) {
  const struct sigaction& previous = g_previous[i];
  if (previous.sa_flags & SA_SIGINFO) return previous.sa_sigaction != nullptr;
  return previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN;
}

void on_flush_signal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const int i = signal_index(sig);
  if (i < 0) return;
  if (!previous_is_function(i) && g_flushing.load()) {
    // The same signal again while the timeline is being written: the user insists. Die now (the
    // signal is blocked in its handler, so it is delivered, by default, on return).
    sigaction(sig, &g_previous[i], nullptr);
    raise(sig);
    errno = saved_errno;
    return;
  }
  g_pending[i].store(1);
  sem_post(&g_wakeup);
  // Chain from the handler itself: e.g. Python's handler must see the signal on its own terms.
  if (previous_is_function(i)) {
    const struct sigaction& previous = g_previous[i];
    if (previous.sa_flags & SA_SIGINFO) {
      previous.sa_sigaction(sig, info, context);
    } else {
      previous.sa_handler(sig);
    }
  }
  errno = saved_errno;
}

void watch_signals() {
  // Let the re-raised signal land here too, whatever mask the installing thread had.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : kSignals) sigaddset(&signals, sig);
  pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
  for (;;) {
    if (sem_wait(&g_wakeup) != 0) continue;  // EINTR
    g_flushing.store(true);
    {
      Callbacks& c = callbacks();
      std::lock_guard<std::mutex> lock(c.mutex);
      for (int i = 0; i < kNumSignals; ++i) {
        if (g_pending[i].load() == 0) continue;
        for (auto& [id, callback] : c.list) callback(kSignals[i], !previous_is_function(i));
      }
    }
    {
      auto& open = detail::open_writers();
      std::lock_guard<std::mutex> lock(open.mutex);
      for (TraceWriter::Impl* writer : open.writers) detail::close_writer(writer);
    }
    bool lingered = false;
    for (int i = 0; i < kNumSignals; ++i) {
      if (g_pending[i].exchange(0) == 0 || previous_is_function(i)) continue;
      if (!lingered) {
        std::this_thread::sleep_for(std::chrono::milliseconds(g_linger_ms.load()));
        lingered = true;
      }
      // The previous action was the default: restore it and let the signal kill the process as it
      // would have without us.
      sigaction(kSignals[i], &g_previous[i], nullptr);
      kill(getpid(), kSignals[i]);
    }
    g_flushing.store(false);
  }
}

// fork() without exec: the child has neither the watcher thread nor its parent's writer threads,
// so it gets the previous signal actions back (else SIGTERM could not kill it) and an empty
// registry; it may install again.
void before_fork() {
  g_install_mutex.lock();
  detail::open_writers().mutex.lock();
}

void after_fork_in_parent() {
  detail::open_writers().mutex.unlock();
  g_install_mutex.unlock();
}

void after_fork_in_child() {
  detail::open_writers().writers.clear();
  if (g_installed) {
    for (int i = 0; i < kNumSignals; ++i) {
      if (g_handled[i]) sigaction(kSignals[i], &g_previous[i], nullptr);
      g_pending[i].store(0);
    }
    sem_destroy(&g_wakeup);
    g_installed = false;
  }
  g_flushing.store(false);
  detail::open_writers().mutex.unlock();
  g_install_mutex.unlock();
}

}  // namespace

int add_signal_callback(std::function<void(int, bool)> callback) {
  Callbacks& c = callbacks();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.list.emplace_back(c.next_id, std::move(callback));
  return c.next_id++;
}

void remove_signal_callback(int id) {
  Callbacks& c = callbacks();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.list.erase(
      std::remove_if(c.list.begin(), c.list.end(), [&](const auto& e) { return e.first == id; }),
      c.list.end());
}

void install_signal_flush(std::chrono::milliseconds linger) {
  int64_t ms = linger.count(), current = g_linger_ms.load();
  while (ms > current && !g_linger_ms.compare_exchange_weak(current, ms)) {
  }
  static std::once_flag at_fork;
  std::call_once(at_fork,
                 [] { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_installed) return;
  sem_init(&g_wakeup, 0, 0);
  std::thread(watch_signals).detach();
  for (int i = 0; i < kNumSignals; ++i) {
    sigaction(kSignals[i], nullptr, &g_previous[i]);
    g_handled[i] = (g_previous[i].sa_flags & SA_SIGINFO) || g_previous[i].sa_handler != SIG_IGN;
    if (!g_handled[i]) continue;
    struct sigaction action = {};
    action.sa_sigaction = on_flush_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    for (int sig : kSignals) sigaddset(&action.sa_mask, sig);
    sigaction(kSignals[i], &action, nullptr);
  }
  g_installed = true;
}

}  // namespace ranktime::timeline
