// The extension module ranktime._c10d: creates ProcessGroupRanktime for torch.distributed.
// ranktime/_distributed.py registers it as the backend "ranktime"; use that, not this module.
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

#include "process_group.h"
#include "ranktime/ranktime.h"

PYBIND11_MODULE(_c10d, m) {
  using ranktime::c10d::C10dBase;
  using ranktime::c10d::ProcessGroupRanktime;
  m.doc() = "ranktime's torch.distributed backend; import ranktime.torch rather than this module.";
  // The libtorch the module was compiled against (CMake's Torch_VERSION).
  m.attr("TORCH_VERSION") = RANKTIME_TORCH_VERSION;

  m.def(
      "create_process_group",
      [](int group_rank, int group_size, const std::string& group_id,
         const std::vector<int64_t>& global_ranks) -> c10::intrusive_ptr<C10dBase> {
        const int rank = ranktime::rank(), size = ranktime::size();
        std::vector<int64_t> everyone;
        for (int r = 0; r < size; ++r) everyone.push_back(r);
        TORCH_CHECK(global_ranks.empty() || global_ranks == everyone,
                    "ranktime: new_group(ranks=", c10::ArrayRef<int64_t>(global_ranks),
                    "): the ranktime backend's groups span every rank (", size,
                    "); ranktime's collectives have no subgroups");
        TORCH_CHECK(group_rank == rank && group_size == size,
                    "ranktime: init_process_group(rank=", group_rank, ", world_size=", group_size,
                    ") disagrees with the runtime: this is ", "rank ", rank, " of ", size,
                    " (ranks come from MPI: start the job with ", "`ranktime run` or `mpirun`)");
        return c10::make_intrusive<ProcessGroupRanktime>(rank, size, group_id);
      },
      py::arg("group_rank"), py::arg("group_size"), py::arg("group_id"), py::arg("global_ranks"),
      py::call_guard<py::gil_scoped_release>());
}
