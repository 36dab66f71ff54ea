// main() for GoogleTest programs that run on every rank under mpirun: starts ranktime, runs the
// same tests in the same order everywhere, and prints results from rank 0 only.
#include <gtest/gtest.h>

#include "ranktime/ranktime.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ranktime::init();
  if (ranktime::rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int result = RUN_ALL_TESTS();
  ranktime::shutdown();
  return result;
}
