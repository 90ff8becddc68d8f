#include "pipeline_cli.h"

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/pipeline_lm.h"
#include "model/config_json.h"

namespace dfl::cli {

namespace {

struct Setup {
  dist::Communicator* comm = nullptr;
  std::vector<StageRange> stages;
  double timeout_s = 120;
  int32_t microbatches = 1;
};

// The job's communicator and stage plan (computed once; every rank gets the same plan).
const Setup* pipeline_setup(const Args& args) {
  if (!args.has("--pipeline-parallel")) return nullptr;
  static Setup s;
  if (s.comm) return &s;
  dist::PipelineOptions po;
  po.n_stages = int32_t(args.integer("--pipeline-parallel", 1));
  DFL_CHECK(po.n_stages >= 1 && po.n_stages <= 1024, "--pipeline-parallel must be in [1, 1024]");
  po.layer_counts = args.str("--pp-layers");
  po.timeout_s = args.number("--pp-timeout", 120);
  DFL_CHECK(po.timeout_s > 0, "--pp-timeout must be positive");
  DFL_CHECK(args.has("--model"), "--pipeline-parallel needs --model");
  dist::Communicator& c = dist::Communicator::world();
  DFL_CHECK(c.size() == po.n_stages, "--pipeline-parallel ", po.n_stages, " but the job has ", c.size(),
            " ranks: start it as `mpirun -np ", po.n_stages, " dflash ...`");
  ConfigOptions co;
  if (args.has("--window-edge")) co.window_edge = cfg::parse_window_edge(args.str("--window-edge"), "--window-edge");
  s.stages = dist::plan_stages(args.str("--model"), co, po);
  s.timeout_s = po.timeout_s;
  s.microbatches = int32_t(args.integer("--pp-microbatches", po.n_stages));
  DFL_CHECK(s.microbatches >= 1 && s.microbatches <= dist::kMaxGroups, "--pp-microbatches must be in [1, ",
            dist::kMaxGroups, "]");
  s.comm = &c;
  return &s;
}

}  // namespace

const std::vector<FlagSpec>& pipeline_flags() {
  static const std::vector<FlagSpec> f = {
      {"--pipeline-parallel", "N", "split the target's layers over the N ranks of `mpirun -np N` "
                                   "(the last rank runs the engine, the drafter and the output)"},
      {"--pp-layers", "A,B,...", "with --pipeline-parallel: layers per stage (default: split by weight bytes)"},
      {"--pp-microbatches", "G", "with --pipeline-parallel: micro-batch groups of concurrent requests kept "
                                 "in flight so the stages overlap (default: the number of stages; 1 = one step at a time)"},
      {"--pp-timeout", "S", "with --pipeline-parallel: longest wait for another rank in a step "
                            "before the job ends with an error (default 120 s)"},
  };
  return f;
}

std::vector<FlagSpec> with_pipeline_flags(std::vector<FlagSpec> f) {
  f.insert(f.end(), pipeline_flags().begin(), pipeline_flags().end());
  return f;
}

bool run_pipeline_worker(const Args& args, int32_t threads) {
  const Setup* s = pipeline_setup(args);
  if (!s || s->comm->rank() == s->comm->size() - 1) return false;
  ConfigOptions co;
  if (args.has("--window-edge")) co.window_edge = cfg::parse_window_edge(args.str("--window-edge"), "--window-edge");
  try {
    dist::run_stage_worker(args.str("--model"), co, s->stages, *s->comm, threads, s->timeout_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash[rank %d]: %s: aborting every rank\n", s->comm->rank(), e.what());
    s->comm->abort(1);
  }
  return true;
}

void add_pipeline_target(const Args& args, EngineOptions& eo) {
  const Setup* s = pipeline_setup(args);
  if (!s) return;
  eo.load_target = dist::pipeline_loader(s->stages, *s->comm, s->timeout_s);
  eo.microbatches = s->microbatches;
}

}  // namespace dfl::cli
