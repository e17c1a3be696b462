// A layout spec's text from its typed form, parse_layout_spec's inverse; see layout_spec.h.
#include <charconv>

#include "reference/layout/layout_spec.h"

namespace dtb {

namespace {
// The shortest decimal text of `x` that reads back as `x` (strtod): "0.5", "2", "1e-05".
std::string exact_number_text(double x) {
  char b[64];
  const auto r = std::to_chars(b, b + sizeof b, x);
  return std::string(b, r.ptr);
}
}  // namespace

std::string layout_spec_text(const LayoutSpec& s, const SpecTextForm& form) {
  auto tok = [](LayoutKey k) { return std::string(spelling(k).spec_token); };
  const ParallelLayout& l = s.l;
  std::string dims;
  auto dim = [&](LayoutKey k, int size, bool always = false) {
    if (size == 1 && !always) return;
    if (!dims.empty()) dims += 'x';
    dims += tok(k) + std::to_string(size);
  };
  dim(LayoutKey::tp, l.tp);
  dim(LayoutKey::cp, l.cp);
  if (l.ep == 1 || form.fixed_dimension_order) {
    dim(LayoutKey::pp, l.pp);
    dim(LayoutKey::dp, l.dp, form.data_parallel_always);
    dim(LayoutKey::ep, l.ep);
  } else {  // the experts' layouts: DP beside EP ("EP2" alone is DP2xEP2), then PP
    if (l.dp != l.ep || l.pp > 1 || form.data_parallel_always) dim(LayoutKey::dp, l.dp, true);
    dim(LayoutKey::ep, l.ep);
    dim(LayoutKey::pp, l.pp);
  }
  if (dims.empty()) dims = tok(LayoutKey::dp) + "1";

  std::vector<std::string> opts;  // every option but the schedule, in canonical order
  if (l.virtual_stages != 1) opts.push_back(tok(LayoutKey::virtual_stages) + std::to_string(l.virtual_stages));
  if (!l.pipeline_layers.empty()) opts.push_back(tok(LayoutKey::pipeline_layers) + pipeline_layers_text(l.pipeline_layers));
  if (l.sequence_parallel && !form.sp_last) opts.push_back(tok(LayoutKey::sequence_parallel));
  if (l.cp_comm_type != ParallelLayout{}.cp_comm_type) opts.push_back(l.cp_comm_type);
  if (s.z.stage > 0) opts.push_back(tok(LayoutKey::zero_stage) + std::to_string(s.z.stage));
  if (s.z.offload_optimizer) opts.push_back(tok(LayoutKey::offload));
  if (s.recompute != Recompute::none) opts.push_back(std::string(to_string(s.recompute)));
  if (s.hier_node_ranks > 0) opts.push_back(tok(LayoutKey::dp_allreduce) + std::to_string(s.hier_node_ranks));
  if (s.dp_sync.staleness > 0) opts.push_back(tok(LayoutKey::staleness) + std::to_string(s.dp_sync.staleness));
  if (s.dp_sync.delay_compensation > 0)
    opts.push_back(tok(LayoutKey::delay_compensation) + (s.dp_sync.delay_compensation == kDefaultDelayCompensation
                                                            ? std::string()
                                                            : exact_number_text(s.dp_sync.delay_compensation)));
  if (s.dp_sync.local_steps > 0) opts.push_back(tok(LayoutKey::local_steps) + std::to_string(s.dp_sync.local_steps));
  if (l.sequence_parallel && form.sp_last) opts.push_back(tok(LayoutKey::sequence_parallel));

  bool schedule = l.schedule != ParallelLayout{}.schedule;  // a schedule other than the default is always named
  if (!schedule && l.pp > 1) {
    switch (form.schedule) {
      case DefaultSchedule::alone: schedule = l.tp == 1 && l.cp == 1 && l.dp == 1 && l.ep == 1 && opts.empty(); break;
      case DefaultSchedule::every_pipeline: schedule = true; break;
      case DefaultSchedule::never: break;
    }
  }
  std::string text = dims;
  if (schedule) text += ":" + l.schedule;
  for (const std::string& o : opts) text += ":" + o;
  return text;
}

nlohmann::json layout_spellings_json() {
  nlohmann::json a = nlohmann::json::array();
  for (const LayoutSpelling& s : layout_spellings())
    a.push_back({{"key", key_name(s.key)},
                 {"config_key", s.config_key},
                 {"spec_token", s.spec_token},
                 {"name_key", s.name_key},
                 {"field_key", s.field_key},
                 {"memory_flag", s.memory_flag}});
  return a;
}

}  // namespace dtb
