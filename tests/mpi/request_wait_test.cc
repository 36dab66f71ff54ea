// The MPI wait of backends/mpi/request_wait.h on every rank under mpirun: it returns when the
// request completes (with the data), and a rank that waits for a late peer sleeps between polls
// instead of spinning (its thread's CPU time stays a small part of the time it waits).
#include "backends/mpi/request_wait.h"

#include <gtest/gtest.h>
#include <mpi.h>
#include <time.h>

#include <chrono>
#include <thread>
#include <vector>

namespace ranktime {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// How late the late rank is: long enough that a spinning wait would burn most of it.
constexpr milliseconds kLate(300);
// A waiting thread that sleeps between polls uses a few percent of the time it waits (about 1,500
// wake-ups of a few microseconds each); one that spins uses as much as it is given.
constexpr double kMaxCpuShare = 0.25;

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Waited {
  double wall_s = 0, cpu_s = 0;
};

// Runs wait() on this thread, measuring it.
template <typename Wait>
Waited measure(Wait wait) {
  const double wall0 = now_s(), cpu0 = thread_cpu_s();
  wait();
  return {now_s() - wall0, thread_cpu_s() - cpu0};
}

class RequestWait : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  void TearDown() override { MPI_Comm_free(&comm_); }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  const nanoseconds spin_ = std::chrono::microseconds(30);
};

TEST_F(RequestWait, ReturnsWithTheMessageOfALateSenderWithoutSpinning) {
  const int last = size_ - 1;
  std::vector<int> message(1000);
  MPI_Barrier(comm_);
  if (rank_ == last) {
    std::this_thread::sleep_for(kLate);
    for (int to = 0; to < last; ++to) {
      for (size_t i = 0; i < message.size(); ++i) message[i] = to * 10000 + static_cast<int>(i);
      MPI_Send(message.data(), static_cast<int>(message.size()), MPI_INT, to, 7, comm_);
    }
    return;
  }
  MPI_Request request;
  MPI_Irecv(message.data(), static_cast<int>(message.size()), MPI_INT, last, 7, comm_, &request);
  int rc = MPI_ERR_OTHER;
  const Waited w = measure([&] { rc = wait_for(&request, spin_); });
  ASSERT_EQ(rc, MPI_SUCCESS);
  EXPECT_EQ(request, MPI_REQUEST_NULL);
  for (size_t i = 0; i < message.size(); ++i) {
    ASSERT_EQ(message[i], rank_ * 10000 + static_cast<int>(i)) << "element " << i;
  }
  EXPECT_LT(w.cpu_s, kMaxCpuShare * w.wall_s)
      << "rank " << rank_ << " used " << w.cpu_s << " s of CPU in a " << w.wall_s << " s wait";
}

TEST_F(RequestWait, AllRanksReturnOnlyAfterTheLastOneArrivedWithoutSpinning) {
  const int last = size_ - 1;
  MPI_Barrier(comm_);
  double arrived_s = 0;  // steady_clock is one clock for every process of this host
  if (rank_ == last) {
    std::this_thread::sleep_for(kLate);
    arrived_s = now_s();
  }
  int rc = MPI_ERR_OTHER;
  const Waited w = measure([&] { rc = wait_for_all_ranks(comm_, spin_); });
  const double returned_s = now_s();
  ASSERT_EQ(rc, MPI_SUCCESS);
  MPI_Bcast(&arrived_s, 1, MPI_DOUBLE, last, comm_);
  EXPECT_GE(returned_s, arrived_s)
      << "rank " << rank_ << " returned before rank " << last << " arrived";
  if (rank_ != last) {
    EXPECT_LT(w.cpu_s, kMaxCpuShare * w.wall_s)
        << "rank " << rank_ << " used " << w.cpu_s << " s of CPU in a " << w.wall_s << " s wait";
  }
}

TEST_F(RequestWait, OnceAllArrivedRunsTheCallAfterwardsAndPassesItsResult) {
  for (const bool direct : {false, true}) {
    for (const int64_t bytes : {int64_t{4}, RankWait::kDirectMaxBytes + 1}) {
      int sum = 0;
      const int rc = once_all_arrived(comm_, RankWait(spin_, direct), bytes, [&] {
        int one = 1;
        return MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm_);
      });
      ASSERT_EQ(rc, MPI_SUCCESS);
      EXPECT_EQ(sum, size_) << "direct " << direct << ", " << bytes << " bytes";
    }
  }
}

// Where small collectives may go at once, a small call starts before the last rank arrives and
// a large one only after; without `direct`, neither starts before it.
TEST_F(RequestWait, OnlySmallCallsSkipTheBarrierAndOnlyWhereAllowed) {
  const int last = size_ - 1;
  struct Case {
    bool direct;
    int64_t bytes;
    bool starts_early;
  };
  for (const Case c : {Case{true, 4, true}, Case{true, RankWait::kDirectMaxBytes, true},
                       Case{true, RankWait::kDirectMaxBytes + 1, false}, Case{false, 4, false}}) {
    MPI_Barrier(comm_);
    double arrived_s = 0;
    if (rank_ == last) {
      std::this_thread::sleep_for(milliseconds(100));
      arrived_s = now_s();
    }
    double started_s = 0;
    const int rc = once_all_arrived(comm_, RankWait(spin_, c.direct), c.bytes, [&] {
      started_s = now_s();  // a local call: only the barrier (if any) waits for the others
      return MPI_SUCCESS;
    });
    ASSERT_EQ(rc, MPI_SUCCESS);
    MPI_Bcast(&arrived_s, 1, MPI_DOUBLE, last, comm_);
    if (rank_ != last) {
      EXPECT_EQ(started_s < arrived_s, c.starts_early)
          << "rank " << rank_ << ", direct " << c.direct << ", " << c.bytes << " bytes";
    }
  }
}

TEST_F(RequestWait, ASpinLongerThanTheWaitStillReturns) {
  // RANKTIME_SPIN_US's largest value: never sleeps, as Open MPI's own blocking wait.
  int value = rank_ + 1;
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MAX, comm_, &request);
  ASSERT_EQ(wait_for(&request, std::chrono::hours(1)), MPI_SUCCESS);
  EXPECT_EQ(value, size_);
}

}  // namespace
}  // namespace ranktime
