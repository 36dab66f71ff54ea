// init()/shutdown() life cycle: use before init and after shutdown is a clear error; init again
// after shutdown works (MPI stays initialised until exit).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ranktime/ranktime.h"

namespace {

TEST(Lifecycle, UseBeforeInitThrows) {
  EXPECT_FALSE(ranktime::is_initialized());
  float x = 1;
  try {
    ranktime::allreduce_async({&x, ranktime::DataType::kFloat32, {1}}, "early");
    FAIL() << "expected ranktime::Error";
  } catch (const ranktime::Error& e) {
    EXPECT_NE(std::string(e.what()).find("init()"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ranktime::rank(), ranktime::Error);
}

TEST(Lifecycle, InitShutdownTwice) {
  for (int round = 0; round < 2; ++round) {
    ranktime::init();
    ranktime::init();  // a second init while running is a no-op
    ASSERT_TRUE(ranktime::is_initialized());
    std::vector<int64_t> v(5, ranktime::rank());
    ASSERT_TRUE(ranktime::allreduce_async({v.data(), ranktime::DataType::kInt64, {5}}, "round")
                    .wait()
                    .ok());
    const int64_t n = ranktime::size();
    EXPECT_EQ(v[4], n * (n - 1) / 2);
    ranktime::shutdown();
    EXPECT_FALSE(ranktime::is_initialized());
    float x = 1;
    EXPECT_THROW(ranktime::allreduce_async({&x, ranktime::DataType::kFloat32, {1}}, "late"),
                 ranktime::Error);
  }
}

}  // namespace
