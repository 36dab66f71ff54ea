// The extension module ranktime._core: the C++ API of ranktime.h as Python sees it. The Python
// package on top of it (bindings/ranktime/) adds default names, output allocation and torch.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <utility>

#include "ranktime/clock_ns.h"
#include "ranktime/ranktime.h"
#include "tensor_import.h"

namespace ranktime::python {
namespace {

void ThrowIfFailed(const Status& status) {
  if (!status.ok()) throw Error(status.message());
}

// A submission refused because its name is in flight: Python's NameInFlightError, both a
// RanktimeError and (as in Horovod) a ValueError, raised by the submitting call.
class NameInFlightError : public Error {
 public:
  using Error::Error;
};

// A submission whose own arguments are wrong (Status::InvalidArgument): Python's
// InvalidArgumentError, a RanktimeError and (as in Horovod) a ValueError, raised by the call.
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// Raises what a handle that completed at submission says about the call itself.
void ThrowIfRefused(const Handle& handle) {
  if (!handle.ready()) return;
  Status status = handle.wait();  // completed at submission: does not block
  if (status.name_in_flight()) throw NameInFlightError(status.message());
  if (status.invalid_argument()) throw InvalidArgumentError(status.message());
}

// One submitted operation: the runtime's handle and the caller's tensor, whose memory the
// runtime reads and writes until the handle completes.
class Operation {
 public:
  Operation(Handle handle, ImportedTensor tensor, py::object keep_alive)
      : handle_(std::move(handle)),
        tensor_(std::move(tensor)),
        keep_alive_(std::move(keep_alive)) {}
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  // Dropping an operation early must not free memory the runtime is still using.
  ~Operation() {
    if (handle_.valid() && !handle_.ready()) {
      py::gil_scoped_release release;
      handle_.wait();
    }
  }

  void Wait() const {
    Status status;
    {
      py::gil_scoped_release release;
      status = handle_.wait();
    }
    ThrowIfFailed(status);
  }

  bool Done() const { return handle_.ready(); }

  std::vector<int64_t> OutputShape() const {
    Wait();
    return handle_.output_shape();
  }

  // Alltoall: how many rows of the output came from each rank.
  std::vector<int32_t> ReceivedSplits() const {
    Wait();
    return handle_.received_splits();
  }

  // Allgather, reducescatter, alltoall: copies the result's bytes into `destination`, a
  // contiguous host tensor of the input's dtype and output_shape() that the caller allocated in
  // its own framework.
  void CopyOutputInto(py::handle destination) const {
    Wait();
    ImportedTensor out = ImportedTensor::FromObject(destination, /*writable=*/true);
    const auto& bytes = handle_.output();
    const TensorView& view = out.view();
    if (view.device != kCpuDevice || view.dtype != tensor_.view().dtype ||
        view.num_bytes() != bytes.size()) {
      throw py::value_error("ranktime: output buffer does not match the result (" +
                            std::to_string(bytes.size()) + " bytes of " +
                            dtype_name(tensor_.view().dtype) + " in host memory expected)");
    }
    py::gil_scoped_release release;
    if (!bytes.empty()) std::memcpy(view.data, bytes.data(), bytes.size());
  }

 private:
  Handle handle_;
  ImportedTensor tensor_;
  py::object keep_alive_;  // e.g. the CUDA event named in the TensorView
};

TensorView WithReadyEvent(TensorView view, uintptr_t ready_event) {
  view.ready_event = reinterpret_cast<void*>(ready_event);
  return view;
}

std::unique_ptr<Operation> Start(Handle handle, ImportedTensor imported, py::object keep_alive) {
  ThrowIfRefused(handle);
  return std::make_unique<Operation>(std::move(handle), std::move(imported), std::move(keep_alive));
}

// A group: imports every tensor, submits them with `submit(views)`, and returns one Operation per
// tensor (a list), or raises what refused the call.
template <typename Submit>
py::list StartGroup(const py::sequence& tensors, bool writable,
                    const std::vector<uintptr_t>& ready_events, const py::object& keep_alive,
                    Submit submit) {
  if (ready_events.size() != tensors.size())
    throw py::value_error("ranktime: one ready event per tensor expected");
  std::vector<ImportedTensor> imported;
  std::vector<TensorView> views;
  for (size_t i = 0; i < tensors.size(); ++i) {
    imported.push_back(ImportedTensor::FromObject(tensors[i], writable));
    views.push_back(WithReadyEvent(imported.back().view(), ready_events[i]));
  }
  std::vector<Handle> handles = submit(views);
  for (const Handle& h : handles) ThrowIfRefused(h);
  py::list operations;
  for (size_t i = 0; i < handles.size(); ++i) {
    operations.append(py::cast(
        std::make_unique<Operation>(std::move(handles[i]), std::move(imported[i]), keep_alive)));
  }
  return operations;
}

}  // namespace
}  // namespace ranktime::python

PYBIND11_MODULE(_core, m) {
  using namespace ranktime;
  using namespace ranktime::python;

  m.doc() = "ranktime's C++ runtime; use the `ranktime` package rather than this module.";

  auto& ranktime_error = py::register_exception<Error>(m, "RanktimeError", PyExc_RuntimeError);
  py::register_exception<NameInFlightError>(
      m, "NameInFlightError", py::make_tuple(ranktime_error, py::handle(PyExc_ValueError)));
  py::register_exception<InvalidArgumentError>(
      m, "InvalidArgumentError", py::make_tuple(ranktime_error, py::handle(PyExc_ValueError)));

  py::enum_<ReduceOp>(m, "ReduceOp", "Reduction applied by allreduce.")
      .value("Sum", ReduceOp::kSum)
      .value("Average", ReduceOp::kAverage)
      .value("Min", ReduceOp::kMin)
      .value("Max", ReduceOp::kMax)
      .value("Product", ReduceOp::kProduct)
      .value("Adasum", ReduceOp::kAdasum)
      .export_values();

  // Collective calls block on other ranks: they release the GIL so other threads keep running.
  m.def("init", [] {
    py::gil_scoped_release release;
    init();
  });
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    shutdown();
  });
  m.def("is_initialized", &is_initialized);
  m.def("rank", &rank);
  m.def("size", &size);
  m.def("local_rank", &local_rank);
  m.def("local_size", &local_size);
  m.def("cross_rank", &cross_rank);
  m.def("cross_size", &cross_size);
  m.def(
      "barrier",
      [](int process_set) {
        Status status;
        {
          py::gil_scoped_release release;
          status = barrier(process_set);
        }
        ThrowIfFailed(status);
      },
      py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "join",
      [](int device) {
        Status status;
        int last = -1;
        {
          py::gil_scoped_release release;
          status = join(device, &last);
        }
        ThrowIfFailed(status);
        return last;
      },
      py::arg("device") = kCpuDevice);
  m.def(
      "add_process_set",
      [](std::vector<int> ranks) {
        py::gil_scoped_release release;
        return add_process_set(std::move(ranks));
      },
      py::arg("ranks"));
  m.def(
      "remove_process_set",
      [](int process_set) {
        py::gil_scoped_release release;
        return remove_process_set(process_set);
      },
      py::arg("process_set"));
  m.def("process_set_ids", &process_set_ids);
  m.def("process_set_ranks", &process_set_ranks, py::arg("process_set"));
  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) {
        Status status;
        {
          py::gil_scoped_release release;
          status = start_timeline(path, mark_cycles);
        }
        ThrowIfFailed(status);
      },
      py::arg("path"), py::arg("mark_cycles") = false);
  m.def(
      "mark_step", [](std::optional<int64_t> step) { mark_step(step); },
      py::arg("step") = py::none());
  m.def(
      "region_begin", [](std::string_view name) { region_begin(name); }, py::arg("name"),
      "Begins region `name` on this thread (see ranktime.region).");
  m.def(
      "region_end", [](std::string_view name) { region_end(name); }, py::arg("name"),
      "Ends region `name`, the innermost open on this thread; raises RanktimeError naming the "
      "region and the rank when it is not.");
  // Time the calling thread waits for the other ranks outside ranktime's own waits: DDP waits
  // for its buckets' futures at the end of backward. ranktime.torch.instrument opens one when
  // backward's compute has ended and drops it when DDP's wait returns; regions leave it out of
  // their own time, as they do Handle::wait(). Dropped on the thread that made it.
  py::class_<detail::BlockedScope>(m, "_BlockedScope").def(py::init<>());
  m.def("clock_ns", &clock_ns,
        "This rank's clock in ns (the timeline's, before rank 0 maps it by the rank's offset).");
  m.def("stop_timeline", [] {
    Status status;
    {
      py::gil_scoped_release release;
      status = stop_timeline();
    }
    ThrowIfFailed(status);
  });

  py::class_<RankLateness>(m, "RankLateness",
                           "How late one rank was behind the first rank to become ready.")
      .def_readonly("rank", &RankLateness::rank)
      .def_readonly("hostname", &RankLateness::hostname)
      .def_readonly("negotiations", &RankLateness::negotiations, "since start")
      .def_readonly("times_last", &RankLateness::times_last,
                    "negotiations since start in which this rank was the last to be ready")
      .def_readonly("window", &RankLateness::window, "negotiations in the sliding window")
      .def_readonly("window_times_last", &RankLateness::window_times_last)
      .def_readonly("mean_lag_us", &RankLateness::mean_lag_us, "over the window")
      .def_readonly("median_lag_us", &RankLateness::median_lag_us, "over the window")
      .def_readonly("cost_us", &RankLateness::cost_us,
                    "since start: how much sooner the steps would have completed had this rank "
                    "been on time (what-if replay)")
      .def_readonly("cost_per_step_us", &RankLateness::cost_per_step_us,
                    "the same per step, over the last 100 steps")
      .def_readonly("p95_lag_us", &RankLateness::p95_lag_us, "over the window")
      .def_readonly("max_lag_us", &RankLateness::max_lag_us, "over the window")
      .def("__repr__", [](const RankLateness& l) {
        return "<ranktime.RankLateness rank " + std::to_string(l.rank) + " last in " +
               std::to_string(l.times_last) + " of " + std::to_string(l.negotiations) +
               ", median lag " + std::to_string(l.median_lag_us) + " us>";
      });
  m.def("lateness", &lateness,
        "Per-rank lateness statistics as rank 0 holds them; an empty list on other ranks.");

  py::class_<Operation>(m, "Operation", "A submitted collective; keeps its tensor alive.")
      .def("wait", &Operation::Wait, "Blocks until completion; raises RanktimeError on failure.")
      .def("done", &Operation::Done)
      .def("output_shape", &Operation::OutputShape)
      .def("received_splits", &Operation::ReceivedSplits)
      .def("copy_output_into", &Operation::CopyOutputInto, py::arg("destination"));

  // `ready_event`: a cudaEvent_t (as an integer) recorded after the producer of a device tensor;
  // `keep_alive`: whatever owns it. Both stay alive with the operation.
  m.def(
      "allreduce_async",
      [](py::handle tensor, const std::string& name, ReduceOp op, uintptr_t ready_event,
         py::object keep_alive, int process_set) {
        ImportedTensor imported = ImportedTensor::FromObject(tensor, /*writable=*/true);
        Handle handle =
            allreduce_async(WithReadyEvent(imported.view(), ready_event), name, op, process_set);
        return Start(std::move(handle), std::move(imported), std::move(keep_alive));
      },
      py::arg("tensor"), py::arg("name"), py::arg("op") = ReduceOp::kSum,
      py::arg("ready_event") = 0, py::arg("keep_alive") = py::none(),
      py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "allgather_async",
      [](py::handle tensor, const std::string& name, uintptr_t ready_event, py::object keep_alive,
         int process_set) {
        ImportedTensor imported = ImportedTensor::FromObject(tensor, /*writable=*/false);
        Handle handle =
            allgather_async(WithReadyEvent(imported.view(), ready_event), name, process_set);
        return Start(std::move(handle), std::move(imported), std::move(keep_alive));
      },
      py::arg("tensor"), py::arg("name"), py::arg("ready_event") = 0,
      py::arg("keep_alive") = py::none(), py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "broadcast_async",
      [](py::handle tensor, int root_rank, const std::string& name, uintptr_t ready_event,
         py::object keep_alive, int process_set) {
        ImportedTensor imported = ImportedTensor::FromObject(tensor, /*writable=*/true);
        Handle handle = broadcast_async(WithReadyEvent(imported.view(), ready_event), root_rank,
                                        name, process_set);
        return Start(std::move(handle), std::move(imported), std::move(keep_alive));
      },
      py::arg("tensor"), py::arg("root_rank"), py::arg("name"), py::arg("ready_event") = 0,
      py::arg("keep_alive") = py::none(), py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "reducescatter_async",
      [](py::handle tensor, const std::string& name, ReduceOp op, uintptr_t ready_event,
         py::object keep_alive, int process_set) {
        ImportedTensor imported = ImportedTensor::FromObject(tensor, /*writable=*/false);
        Handle handle = reducescatter_async(WithReadyEvent(imported.view(), ready_event), name, op,
                                            process_set);
        return Start(std::move(handle), std::move(imported), std::move(keep_alive));
      },
      py::arg("tensor"), py::arg("name"), py::arg("op") = ReduceOp::kSum,
      py::arg("ready_event") = 0, py::arg("keep_alive") = py::none(),
      py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "alltoall_async",
      [](py::handle tensor, const std::vector<int32_t>& splits, const std::string& name,
         uintptr_t ready_event, py::object keep_alive, int process_set) {
        ImportedTensor imported = ImportedTensor::FromObject(tensor, /*writable=*/false);
        Handle handle =
            alltoall_async(WithReadyEvent(imported.view(), ready_event), splits, name, process_set);
        return Start(std::move(handle), std::move(imported), std::move(keep_alive));
      },
      py::arg("tensor"), py::arg("splits"), py::arg("name"), py::arg("ready_event") = 0,
      py::arg("keep_alive") = py::none(), py::arg("process_set") = kGlobalProcessSet);

  // Groups: a sequence of tensors and one ready event per tensor; a list of Operations back.
  m.def(
      "grouped_allreduce_async",
      [](const py::sequence& tensors, const std::string& name, ReduceOp op,
         const std::vector<uintptr_t>& ready_events, const py::object& keep_alive,
         int process_set) {
        return StartGroup(tensors, /*writable=*/true, ready_events, keep_alive,
                          [&](const std::vector<TensorView>& views) {
                            return grouped_allreduce_async(views, name, op, process_set);
                          });
      },
      py::arg("tensors"), py::arg("name"), py::arg("op"), py::arg("ready_events"),
      py::arg("keep_alive") = py::none(), py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "grouped_allgather_async",
      [](const py::sequence& tensors, const std::string& name,
         const std::vector<uintptr_t>& ready_events, const py::object& keep_alive,
         int process_set) {
        return StartGroup(tensors, /*writable=*/false, ready_events, keep_alive,
                          [&](const std::vector<TensorView>& views) {
                            return grouped_allgather_async(views, name, process_set);
                          });
      },
      py::arg("tensors"), py::arg("name"), py::arg("ready_events"),
      py::arg("keep_alive") = py::none(), py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "grouped_reducescatter_async",
      [](const py::sequence& tensors, const std::string& name, ReduceOp op,
         const std::vector<uintptr_t>& ready_events, const py::object& keep_alive,
         int process_set) {
        return StartGroup(tensors, /*writable=*/false, ready_events, keep_alive,
                          [&](const std::vector<TensorView>& views) {
                            return grouped_reducescatter_async(views, name, op, process_set);
                          });
      },
      py::arg("tensors"), py::arg("name"), py::arg("op"), py::arg("ready_events"),
      py::arg("keep_alive") = py::none(), py::arg("process_set") = kGlobalProcessSet);
}
