// Rank <-> grid coordinates in tp-cp-dp-pp order, group rank lists, the groups split from a
// communicator, and layout validation.
#include "reference/layout/process_grid.h"

#include <cctype>

#include "kernels/error.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

GridCoord grid_coord(int rank, const ParallelLayout& l) {
  DTB_CHECK(rank >= 0 && rank < l.world(), "grid_coord: rank " + std::to_string(rank) + " outside the grid");
  const int tcp = l.tp * l.cp;
  GridCoord c{rank % l.tp, (rank / tcp) % l.dp, rank / (tcp * l.dp)};
  c.cp = (rank / l.tp) % l.cp;
  return c;
}

int grid_rank(const GridCoord& c, const ParallelLayout& l) {
  DTB_CHECK(c.tp >= 0 && c.tp < l.tp && c.cp >= 0 && c.cp < l.cp && c.dp >= 0 && c.dp < l.dp && c.pp >= 0 &&
                c.pp < l.pp,
            "grid_rank: coordinates outside the grid");
  return c.tp + l.tp * (c.cp + l.cp * (c.dp + l.dp * c.pp));
}

OwnedGroups make_parallel_groups(Communicator& world, const ParallelLayout& layout) {
  const GridCoord c = grid_coord(world.rank(), layout);
  // Color: the coordinates that stay fixed in the group; key: the one that varies.
  OwnedGroups g;
  auto name = [](LayoutKey k) { return spelling(k).name_key; };  // a group is named as its dimension in a record name
  // With cp = 1 (c.cp = 0) every colour is the one of the tp-dp-pp grid.
  const int tp = layout.tp, cp = layout.cp, dp = layout.dp;
  g.tp = world.split(c.cp + cp * (c.dp + dp * c.pp), c.tp, name(LayoutKey::tp));
  g.dp = world.split(c.tp + tp * (c.cp + cp * c.pp), c.dp, name(LayoutKey::dp));
  g.pp = world.split(c.tp + tp * (c.cp + cp * c.dp), c.pp, name(LayoutKey::pp));
  g.pp_backward = world.split(c.tp + tp * (c.cp + cp * c.dp), c.pp, "pp-backward");
  if (layout.ep > 1) {
    const int e = ep_rank(c.dp, layout), x = expert_dp_rank(c.dp, layout), nx = layout.dp / layout.ep;
    g.ep = world.split(c.tp + tp * (c.cp + cp * (x + nx * c.pp)), e, name(LayoutKey::ep));
    g.expert_dp = world.split(c.tp + tp * (c.cp + cp * (e + layout.ep * c.pp)), x, "expert-dp");
  }
  if (cp > 1) {
    g.cp = world.split(c.tp + tp * (c.dp + dp * c.pp), c.cp, name(LayoutKey::cp));
    g.dp_cp = world.split(c.tp + tp * c.pp, c.cp + cp * c.dp, "dp-cp");
  }
  return g;
}

namespace {

template <typename Set>
std::vector<int> group_along(int rank, const ParallelLayout& l, int size, Set set) {
  std::vector<int> ranks;
  for (int i = 0; i < size; ++i) {
    GridCoord c = grid_coord(rank, l);
    set(c, i);
    ranks.push_back(grid_rank(c, l));
  }
  return ranks;
}

std::string num(int64_t x) { return std::to_string(x); }

}  // namespace

std::vector<int> tp_group(int rank, const ParallelLayout& l) {
  return group_along(rank, l, l.tp, [](GridCoord& c, int i) { c.tp = i; });
}
std::vector<int> dp_group(int rank, const ParallelLayout& l) {
  return group_along(rank, l, l.dp, [](GridCoord& c, int i) { c.dp = i; });
}
std::vector<int> pp_group(int rank, const ParallelLayout& l) {
  return group_along(rank, l, l.pp, [](GridCoord& c, int i) { c.pp = i; });
}

std::vector<int> cp_group(int rank, const ParallelLayout& l) {
  return group_along(rank, l, l.cp, [](GridCoord& c, int i) { c.cp = i; });
}
std::vector<int> dp_cp_group(int rank, const ParallelLayout& l) {
  return group_along(rank, l, l.cp * l.dp, [&](GridCoord& c, int i) { c.cp = i % l.cp, c.dp = i / l.cp; });
}

std::vector<int> ep_group(int rank, const ParallelLayout& l) {
  const int x = expert_dp_rank(grid_coord(rank, l).dp, l);
  return group_along(rank, l, l.ep, [&](GridCoord& c, int i) { c.dp = x * l.ep + i; });
}
std::vector<int> expert_dp_group(int rank, const ParallelLayout& l) {
  const int e = ep_rank(grid_coord(rank, l).dp, l);
  return group_along(rank, l, l.dp / l.ep, [&](GridCoord& c, int i) { c.dp = i * l.ep + e; });
}

std::vector<int> stage_layers(const ParallelLayout& l, int L) {
  if (!l.pipeline_layers.empty()) return l.pipeline_layers;
  const int nv = l.pp * l.virtual_stages;
  return std::vector<int>(size_t(nv), L / nv);
}

int stage_first_layer(const ParallelLayout& l, int L, int vs) {
  const std::vector<int> n = stage_layers(l, L);
  DTB_CHECK(vs >= 0 && vs <= int(n.size()), "stage_first_layer: virtual stage out of [0, pp v]");
  int first = 0;
  for (int s = 0; s < vs; ++s) first += n[size_t(s)];
  return first;
}

void check_pipeline_layers(const std::vector<int>& layers, int64_t nv, int64_t L, const std::string& where) {
  const std::string split = "pipeline_layers " + pipeline_layers_text(layers);
  if (int64_t(layers.size()) != nv)
    throw InputError(split + " has " + std::to_string(layers.size()) + " entries, not one per virtual stage: " + where +
                     " = " + std::to_string(nv));
  int64_t sum = 0;
  for (int n : layers) {
    if (n < 1) throw InputError(split + ": every stage needs at least one layer");
    sum += n;
  }
  if (sum != L)
    throw InputError(split + " sums to " + std::to_string(sum) + " layers, not the model's L = " + std::to_string(L));
}

std::string pipeline_layers_text(const std::vector<int>& layers) {
  std::string t;
  for (int n : layers) {
    if (!t.empty()) t += '+';
    t += std::to_string(n);
  }
  return t.empty() ? "even" : t;
}

std::vector<int> parse_pipeline_layers(const std::string& text) {
  auto bad = [&] {
    return InputError("pipeline_layers '" + printable(text, 40) + "' is not layer counts joined by '+' (e.g. 3+1)");
  };
  std::vector<int> out;
  size_t pos = 0;
  while (true) {
    size_t end = pos;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == pos || end - pos > 4) throw bad();
    const int n = std::stoi(text.substr(pos, end - pos));
    if (n < 1 || n > kMaxStageLayers) throw bad();
    out.push_back(n);
    if (end == text.size()) return out;
    if (text[end] != '+') throw bad();
    pos = end + 1;
  }
}

void validate_layout(const ParallelLayout& l, const GptConfig& m, int global_batch, int world_size, int seq_len) {
  const std::string cpk = spelling(LayoutKey::cp).config_key, cpt = spelling(LayoutKey::cp_comm_type).config_key;
  if (l.tp < 1 || l.dp < 1 || l.pp < 1 || l.micro_batches < 1 || l.virtual_stages < 1)
    throw InputError("tensor_parallel, data_parallel, pipeline_parallel, micro_batches and virtual_stages must be >= 1");
  if (l.cp < 1) throw InputError(cpk + " must be >= 1, got " + num(l.cp));
  if (l.world() != world_size)
    throw InputError("tensor_parallel (" + num(l.tp) + ") x " + (l.cp > 1 ? cpk + " (" + num(l.cp) + ") x " : "") +
                     "data_parallel (" + num(l.dp) + ") x pipeline_parallel (" + num(l.pp) + ") = " + num(l.world()) +
                     " is not the world size " + num(world_size));
  if (l.cp_comm_type != "p2p" && l.cp_comm_type != "all_gather")
    throw InputError(cpt + " '" + printable(l.cp_comm_type, 40) + "' is not \"p2p\" or \"all_gather\"");
  if (l.cp > 1 && seq_len > 0 && seq_len % (2 * int64_t(l.cp)) != 0)
    throw InputError("seq_len " + num(seq_len) + " is not divisible by 2 x " + cpk + " = " + num(2 * int64_t(l.cp)) +
                     " (each CP rank holds two of 2 x " + cpk + " equal chunks of every sequence)");
  if (m.NH % l.tp != 0)
    throw InputError("model.NH = " + num(m.NH) + " heads are not divisible by tensor_parallel = " + num(l.tp));
  if (m.V % l.tp != 0)
    throw InputError("model.V = " + num(m.V) + " (vocabulary) is not divisible by tensor_parallel = " + num(l.tp));
  if (l.schedule != "gpipe" && l.schedule != "1f1b" && l.schedule != "interleaved" && l.schedule != "zb-h1")
    throw InputError("unknown schedule '" + printable(l.schedule, 40) + "' (gpipe, 1f1b, interleaved, zb-h1)");
  if (l.schedule == "zb-h1" && m.moe.num_experts > 0)
    throw InputError("schedule zb-h1 with an MoE model (model.num_experts = " + num(m.moe.num_experts) +
                     ") is not supported yet");
  if (l.schedule == "zb-h1" && l.sequence_parallel)
    throw InputError("schedule zb-h1 with sequence_parallel is not supported yet");
  if (l.schedule != "interleaved" && l.virtual_stages != 1)
    throw InputError("virtual_stages = " + num(l.virtual_stages) + " needs schedule \"interleaved\", not \"" +
                     printable(l.schedule, 40) + "\"");
  if (l.schedule == "interleaved") {
    if (l.virtual_stages < 2)
      throw InputError("schedule \"interleaved\" needs virtual_stages >= 2, got " + num(l.virtual_stages));
    if (l.micro_batches % l.pp != 0)
      throw InputError("schedule \"interleaved\" needs micro_batches (" + num(l.micro_batches) +
                       ") to be a multiple of pipeline_parallel (" + num(l.pp) + ")");
  }
  if (!l.pipeline_layers.empty()) {
    check_pipeline_layers(l.pipeline_layers, int64_t(l.pp) * l.virtual_stages, m.L,
                          "pipeline_parallel (" + num(l.pp) + ") x virtual_stages (" + num(l.virtual_stages) + ")");
  } else if (m.L % (int64_t(l.pp) * l.virtual_stages) != 0) {
    throw InputError("model.L = " + num(m.L) + " layers are not divisible by pipeline_parallel (" + num(l.pp) +
                     ") x virtual_stages (" + num(l.virtual_stages) + "); pipeline_layers gives an uneven split");
  }
  if (l.ep < 1) throw InputError("expert_parallel must be >= 1, got " + num(l.ep));
  if (l.ep > 1 && m.moe.num_experts == 0)
    throw InputError("expert_parallel = " + num(l.ep) + " needs an MoE model (model.num_experts > 0)");
  if (l.dp % l.ep != 0)
    throw InputError("expert_parallel = " + num(l.ep) + " does not divide data_parallel = " + num(l.dp) +
                     " (expert parallelism is carved out of data parallelism)");
  if (m.moe.num_experts > 0 && m.moe.num_experts % l.ep != 0)
    throw InputError("model.num_experts = " + num(m.moe.num_experts) + " experts are not divisible by expert_parallel = " +
                     num(l.ep));
  if (global_batch % (int64_t(l.dp) * l.micro_batches) != 0)
    throw InputError("global batch " + num(global_batch) + " is not divisible by data_parallel (" + num(l.dp) +
                     ") x micro_batches (" + num(l.micro_batches) + ")");
  if (l.sequence_parallel) {
    if (l.tp == 1)
      throw InputError("sequence_parallel needs tensor_parallel > 1 (it splits the TP group's replicated regions)");
    if (m.moe.num_experts > 0)
      throw InputError("sequence_parallel with an MoE model (model.num_experts = " + num(m.moe.num_experts) +
                       ") is not supported yet");
    const int64_t tokens = int64_t(global_batch) / (int64_t(l.dp) * l.micro_batches) * (seq_len / l.cp);
    if (seq_len > 0 && tokens % l.tp != 0)
      throw InputError("sequence_parallel: a micro-batch's " + num(tokens) + " tokens (" +
                       num(global_batch / (l.dp * l.micro_batches)) + " sequences x seq_len " + num(seq_len) +
                       (l.cp > 1 ? " / " + cpk + " " + num(l.cp) : "") + ") are not divisible by tensor_parallel = " +
                       num(l.tp));
  }
}

}  // namespace dtb
