// main() for the GPU backend test binaries, run on every rank under mpirun: MPI with threads (the
// backend's staging worker calls MPI beside the caller), rank 0 prints, and a clear skip where
// there is no CUDA device.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "gpu_test_util.h"

namespace ranktime::gpu_test {
std::string g_mode = "auto";  // --mode=nccl|hierarchical|mpi|auto
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--mode=", 0) == 0) ranktime::gpu_test::g_mode = a.substr(7);
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  if (rank == 0 && ranktime::gpu_test::device_count() == 0) {
    std::printf("no CUDA device: the GPU tests skip\n");
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) std::fprintf(stderr, "MPI does not provide MPI_THREAD_MULTIPLE\n");
    MPI_Finalize();
    return 1;
  }
  const int result = RUN_ALL_TESTS();
  MPI_Finalize();
  return result;
}
