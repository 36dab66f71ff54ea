// ranktime_trace_gen: writes a synthetic timeline that follows docs/timeline-format.md, with a
// known slow rank, fusion and bandwidth: input for the CLI tests and for the reader benchmark.
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

#include "synthetic_trace.h"

int main(int argc, char** argv) {
  ranktime::testing::SyntheticTrace t;
  std::string output;
  double target_mb = 0;
  bool no_run_end = false;
  bool no_closing_bracket = false;
  CLI::App app{"Write a synthetic ranktime timeline"};
  app.add_option("-o,--output", output, "file to write")->required();
  app.add_option("--ranks", t.ranks)->check(CLI::PositiveNumber);
  app.add_option("--tensors", t.tensors)->check(CLI::PositiveNumber);
  app.add_option("--steps", t.steps)->check(CLI::NonNegativeNumber);
  app.add_option("--fused", t.fused, "tensors per fused batch")->check(CLI::PositiveNumber);
  app.add_option("--slow-rank", t.slow_rank);
  app.add_option("--delay-us", t.delay_us, "the slow rank's lag");
  app.add_option("--bytes", t.bytes, "bytes per tensor");
  app.add_option("--collective-us", t.collective_us, "collective time per batch");
  app.add_flag("--mark-cycles", t.mark_cycles);
  app.add_flag("--no-run-end", no_run_end, "leave out ranktime_run_end (as after SIGKILL)");
  app.add_flag("--no-closing-bracket", no_closing_bracket);
  app.add_option("--target-mb", target_mb, "keep adding steps until the file is this big");
  app.add_option("--slow-steps", t.slow_steps, "the slow rank is late only in these steps")
      ->delimiter(',');
  app.add_flag("--step-marks", t.step_marks, "STEP slices on pid 0 (thread 'steps rank r')");
  app.add_option("--start-lag-us", t.start_lag_us, "rank r marks its step r x this late");
  app.add_option("--tensor-name", t.tensor_names, "names of the first tensors (repeat)");
  app.add_option("--hostname", t.hostname, "every rank's host");
  CLI11_PARSE(app, argc, argv);
  t.run_end = !no_run_end;
  t.closing_bracket = !no_closing_bracket;

  std::ofstream out(output, std::ios::binary);
  if (!out) {
    std::cerr << "ranktime_trace_gen: cannot create " << output << "\n";
    return 1;
  }
  std::vector<char> buffer(size_t{1} << 20);
  out.rdbuf()->pubsetbuf(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  ranktime::testing::SyntheticTraceWriter writer(out, t);
  writer.begin();
  int steps = 0;
  const auto target = static_cast<std::streamoff>(target_mb * 1024 * 1024);
  while (steps < t.steps || (target > 0 && out.tellp() < target)) writer.step(steps++);
  writer.finish();
  out.close();
  if (!out) {
    std::cerr << "ranktime_trace_gen: cannot write " << output << "\n";
    return 1;
  }
  std::cout << "steps=" << steps << " events=" << writer.events() << "\n";
  return 0;
}
