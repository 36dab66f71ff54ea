// The control channel's wake word for rank 0 (MpiChannel::share_rank0_wake) on every rank under
// mpirun, all on this host: every rank gets it, a worker's message wakes rank 0 sleeping on it
// (a lost wake would let a one-minute wait run out, and the test fail), and the shared memory
// object's name is gone once every rank has it.
#include "backends/mpi/mpi_channel.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace ranktime {
namespace {

// The runtime's own channel made its word at init; these tests make another on a communicator
// of their own.
class ChannelWake : public ::testing::Test {
 protected:
  void SetUp() override { MPI_Comm_dup(MPI_COMM_WORLD, &comm_); }
  void TearDown() override { MPI_Comm_free(&comm_); }
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Names in /dev/shm that start with `prefix`.
std::vector<std::string> shm_names(const std::string& prefix) {
  std::vector<std::string> names;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0) names.emplace_back(e->d_name);
    }
    closedir(dir);
  }
  return names;
}

TEST_F(ChannelWake, EveryRankGetsTheWordAndItsNameIsGone) {
  MpiChannel channel(comm_);
  WakeWord* word = channel.share_rank0_wake();
  if (channel.size() == 1) {
    EXPECT_EQ(word, nullptr);  // nobody to wake rank 0
    return;
  }
  int have = word != nullptr ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, comm_);
  EXPECT_EQ(have, 1) << "a rank on rank 0's host could not map the word";
  EXPECT_EQ(channel.share_rank0_wake(), word);  // asked again: the same word, no new exchange
  if (channel.rank() == 0) {
    EXPECT_TRUE(shm_names("ranktime-wake-" + std::to_string(getpid()) + "-").empty());
  }
}

TEST_F(ChannelWake, AWorkersMessageWakesRankZero) {
  MpiChannel channel(comm_);
  WakeWord* word = channel.share_rank0_wake();
  if (channel.size() == 1) GTEST_SKIP() << "needs a worker";
  ASSERT_NE(word, nullptr);
  const uint32_t seen = word->value();
  MPI_Barrier(comm_);  // every worker sends after rank 0 read the word
  if (channel.rank() != 0) {
    channel.send(0, std::make_shared<const std::vector<uint8_t>>(1, channel.rank()));
    channel.reap_sends(true);
    return;
  }
  EXPECT_TRUE(word->wait(seen, std::chrono::minutes(1)));
  // Each worker's message arrives (the probe may see it a moment after the wake).
  std::vector<int> got(channel.size(), 0);
  for (int received = 0; received < channel.size() - 1;) {
    int from = -1;
    std::vector<uint8_t> message;
    if (!channel.receive(&from, &message)) continue;
    ASSERT_EQ(message, std::vector<uint8_t>(1, from));
    ++got[from];
    ++received;
  }
  for (int r = 1; r < channel.size(); ++r) EXPECT_EQ(got[r], 1) << "rank " << r;
}

}  // namespace
}  // namespace ranktime
