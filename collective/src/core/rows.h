// Rows of dimension 0, which allgather, reducescatter and alltoall move whole: how many elements
// a row holds, and how reducescatter splits the rows among the ranks. Pure, header-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ranktime {

// Elements in one row of dimension 0: the product of the other dimensions (1 for a vector).
inline int64_t row_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

// Reducescatter's split, as Horovod 0.28.1 makes it: every rank gets dim0 / size rows, and the
// first dim0 % size ranks one more. Rank r's rows start at scatter_first_row(dim0, size, r).
inline int64_t scatter_rows(int64_t dim0, int size, int rank) {
  return dim0 / size + (rank < dim0 % size ? 1 : 0);
}
inline int64_t scatter_first_row(int64_t dim0, int size, int rank) {
  return rank * (dim0 / size) + std::min<int64_t>(rank, dim0 % size);
}

}  // namespace ranktime
