// hello.cc: the smallest ranktime program. Every rank contributes its rank + 1; the allreduce
// averages them in place. Run it under mpirun or `ranktime run`, one process per rank.
#include <ranktime/ranktime.h>

#include <cstdio>
#include <vector>

int main() {
  ranktime::init();  // collective: every rank calls it; initialises MPI
  std::vector<float> grad(1024, float(ranktime::rank() + 1));
  ranktime::Handle h = ranktime::allreduce_async(
      {grad.data(), ranktime::DataType::kFloat32, {1024}}, "grad", ranktime::ReduceOp::kAverage);
  ranktime::Status s = h.wait();  // grad now holds the average over the ranks
  std::printf("rank %d of %d: %s, grad[0] = %g\n", ranktime::rank(), ranktime::size(),
              s.ok() ? "ok" : s.message().c_str(), grad[0]);
  ranktime::shutdown();
  return s.ok() ? 0 : 1;
}
