// libFuzzer target: graph data sets, valid and not, through the graph
// checks, the graph planners and collation. Whatever the graphs claim (node
// columns of another length than n_node, senders past the graph's nodes,
// ids of any integer type, a budget of any size), the engine must answer
// with InvalidArgumentError or a correct batch: every planned graph once,
// within its shape, and every array the shape's size with the padding graph
// holding the rest. Run under ASan and UBSan, so a read past a column is a
// crash the fuzzer records.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <set>
#include <string>

#include "fuzz_util.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/graph.h"

namespace jaxbatch::fuzz {
namespace {

template <typename T>
struct Owned {
  std::vector<T> values;
  std::vector<int64_t> offsets{0};
};

// A ragged column with per-graph lengths `lengths` filled from the fuzzer.
template <typename T>
RaggedColumn RaggedOf(FuzzedDataProvider& in, const std::string& name, DType dtype,
                      const std::vector<int64_t>& lengths, int64_t id_range) {
  auto owned = std::make_shared<Owned<T>>();
  for (int64_t length : lengths) {
    for (int64_t k = 0; k < length; ++k) {
      owned->values.push_back(id_range > 0
                                  ? static_cast<T>(in.ConsumeIntegralInRange<int64_t>(-1, id_range))
                                  : static_cast<T>(in.ConsumeIntegral<uint8_t>()));
    }
    owned->offsets.push_back(static_cast<int64_t>(owned->values.size()));
  }
  return RaggedColumn::Ragged(name, dtype, {}, owned->values.data(),
                              static_cast<int64_t>(owned->values.size()), owned->offsets.data(),
                              static_cast<int64_t>(lengths.size()), owned);
}

RaggedColumn CountsOf(const std::string& name, std::vector<int32_t> counts) {
  auto owned = std::make_shared<std::vector<int32_t>>(std::move(counts));
  return RaggedColumn::Fixed(name, DType::kInt32, {}, owned->data(),
                             static_cast<int64_t>(owned->size()), owned);
}

GraphAlgorithm ConsumeAlgorithm(FuzzedDataProvider& in) {
  return static_cast<GraphAlgorithm>(in.ConsumeIntegralInRange<int>(0, 2));
}

PlannerOptions ConsumeGraphPlanner(FuzzedDataProvider& in) {
  const bool huge = in.ConsumeProbability<float>() < 0.1f;
  const int64_t nodes = ConsumeSize(in, 80, huge);
  const int64_t edges = ConsumeSize(in, 120, huge) - (in.ConsumeBool() ? 1 : 0);
  const int64_t graphs = ConsumeSize(in, 12, huge);
  const GraphAlgorithm algorithm = ConsumeAlgorithm(in);
  std::optional<int64_t> open;
  if (in.ConsumeBool()) open = ConsumeSize(in, 6, false);
  const TooBig too_big = in.ConsumeBool() ? TooBig::kSkip : TooBig::kError;
  if (in.ConsumeBool()) {
    return GraphBucketsOptions{.max_shapes = ConsumeSize(in, 5, false),
                               .nodes = nodes,
                               .edges = edges,
                               .graphs = graphs,
                               .algorithm = algorithm,
                               .open_batches = open,
                               .too_big = too_big};
  }
  return GraphBudgetOptions{.nodes = nodes,
                            .edges = edges,
                            .graphs = graphs,
                            .algorithm = algorithm,
                            .open_batches = open,
                            .too_big = too_big};
}

}  // namespace
}  // namespace jaxbatch::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace jaxbatch;
  using namespace jaxbatch::fuzz;
  FuzzedDataProvider in(data, size);
  const auto n = in.ConsumeIntegralInRange<int64_t>(0, 40);
  std::vector<int64_t> nodes(static_cast<size_t>(n));
  std::vector<int64_t> edges(static_cast<size_t>(n));
  std::vector<int64_t> feature_rows(static_cast<size_t>(n));
  std::vector<int32_t> n_node(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    nodes[static_cast<size_t>(i)] = in.ConsumeIntegralInRange<int64_t>(0, 12);
    edges[static_cast<size_t>(i)] = in.ConsumeIntegralInRange<int64_t>(0, 20);
    // Mostly consistent; sometimes a node column or n_node that disagrees.
    const bool lie = in.ConsumeProbability<float>() < 0.05f;
    feature_rows[static_cast<size_t>(i)] =
        lie ? in.ConsumeIntegralInRange<int64_t>(0, 14) : nodes[static_cast<size_t>(i)];
    n_node[static_cast<size_t>(i)] = static_cast<int32_t>(
        in.ConsumeProbability<float>() < 0.03f ? in.ConsumeIntegralInRange<int32_t>(-3, 30)
                                               : nodes[static_cast<size_t>(i)]);
  }
  const bool wide = in.ConsumeBool();
  const int64_t id_range = 12;  // ids in [-1, 12]: some past a graph's nodes
  std::vector<RaggedColumn> columns;
  columns.push_back(RaggedOf<uint8_t>(in, "nodes/x", DType::kUInt8, feature_rows, 0));
  columns.push_back(RaggedOf<uint8_t>(in, "edges", DType::kUInt8, edges, 0));
  for (const char* name : {kSendersName, kReceiversName}) {
    columns.push_back(wide ? RaggedOf<int64_t>(in, name, DType::kInt64, edges, id_range)
                           : RaggedOf<int32_t>(in, name, DType::kInt32, edges, id_range));
  }
  const bool counted = in.ConsumeBool();
  if (counted) columns.push_back(CountsOf(kNodeCountName, n_node));
  const Dataset dataset(std::move(columns));
  const PlannerOptions options = ConsumeGraphPlanner(in);

  const GraphColumns graph = FindGraphColumns(dataset, "fuzz");
  const std::vector<GraphProblem> bad = FindBadGraphs(dataset, graph);
  std::vector<int64_t> counts = NodeCounts(dataset, graph);
  const std::vector<int64_t> edge_counts = EdgeCounts(dataset);
  std::set<int64_t> bad_ids;
  for (const GraphProblem& p : bad) bad_ids.insert(p.example);
  // Plan the good graphs (as a Loader does), then sometimes a bad one too.
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n; ++i) {
    if (!bad_ids.count(i)) order.push_back(i);
  }
  const bool with_bad = !bad_ids.empty() && in.ConsumeBool();
  if (with_bad) order.push_back(*bad_ids.begin());
  for (int64_t& c : counts) c = std::max<int64_t>(c, 0);
  if (order.empty()) return 0;
  BatchPlan plan;
  try {
    plan = Plan(counts, options, order, edge_counts);
  } catch (const InvalidArgumentError&) {
    return 0;  // refused options or a graph past the budget
  }
  std::multiset<int64_t> placed;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    for (int64_t e : view.all_examples()) placed.insert(e);
    // A huge budget plans in memory of the data (checked above); its
    // arrays are the budget's size, so only small ones are collated.
    if (view.shape.length > 4096 || view.shape.edges > 4096 || view.shape.rows > 4096) continue;
    std::vector<Array> arrays;
    try {
      CollateOptions collate;
      collate.num_threads = in.ConsumeIntegralInRange<int64_t>(1, 3);
      collate.min_bytes_per_thread = 1;
      arrays = Collate(dataset, plan, b, collate);
    } catch (const InvalidArgumentError&) {
      bool holds_bad = false;
      for (int64_t e : view.all_examples()) holds_bad = holds_bad || bad_ids.count(e) > 0;
      FUZZ_CHECK(holds_bad, "batch %lld of good graphs refused", static_cast<long long>(b));
      continue;
    }
    int64_t real_nodes = 0;
    for (int64_t e : view.all_examples()) real_nodes += counts[static_cast<size_t>(e)];
    FUZZ_CHECK(real_nodes <= view.shape.length - 1, "batch %lld over its nodes",
               static_cast<long long>(b));
    for (const Array& a : arrays) {
      const int64_t lead = a.shape.empty() ? 0 : a.shape[0];
      const bool ok =
          lead == view.shape.length || lead == view.shape.edges || lead == view.shape.rows;
      FUZZ_CHECK(ok, "array %s has %lld rows", a.name.c_str(), static_cast<long long>(lead));
      if (a.name == kNodeCountName) {
        int64_t total = 0;
        for (int64_t g = 0; g < view.shape.rows; ++g) {
          int32_t v;
          std::memcpy(&v, a.data + g * 4, 4);
          total += v;
        }
        FUZZ_CHECK(total == view.shape.length, "n_node sums to %lld",
                   static_cast<long long>(total));
      }
    }
  }
  for (int64_t e : order) {
    const bool skipped = std::find(plan.skipped_examples.begin(), plan.skipped_examples.end(), e) !=
                         plan.skipped_examples.end();
    FUZZ_CHECK(placed.count(e) + (skipped ? 1 : 0) <= 1, "graph %lld placed twice",
               static_cast<long long>(e));
  }
  return 0;
}
