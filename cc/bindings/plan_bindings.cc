// Binds plan/: planner options, their validation and keys, Plan() and BatchPlan.
#include <nanobind/operators.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <new>
#include <utility>

#include "bindings.h"
#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/buckets.h"
#include "jaxbatch/plan/graph_fit.h"
#include "jaxbatch/plan/graph_replan.h"
#include "jaxbatch/plan/grid_buckets.h"
#include "jaxbatch/plan/planner.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch::bindings {
namespace {

// A view of one of the plan's vectors that keeps the plan alive.
template <typename T>
nb::ndarray<nb::numpy, const T, nb::ndim<1>> View(const std::vector<T>& v) {
  return nb::ndarray<nb::numpy, const T, nb::ndim<1>>(v.data(), {v.size()}, nb::handle());
}

std::span<const int64_t> Span(const std::optional<Int64Input>& a) {
  return a ? std::span<const int64_t>(a->data(), a->shape(0)) : std::span<const int64_t>();
}

// None stays absent (order.h: every example); an empty array is an empty order.
PlanOrder Order(const std::optional<Int64Input>& a) {
  return a ? PlanOrder(std::span<const int64_t>(a->data(), a->shape(0))) : std::nullopt;
}

// graph_fit.h's FitGraphBudget or FitGraphBuckets: the filled options and
// what they scored.
template <typename Options, auto FitFn>
std::pair<Options, GraphFitScore> Fit(Int64Input nodes, Int64Input edges,
                                      std::optional<Int64Input> order, const GraphFitOptions& fit,
                                      const Options& planner) {
  const std::span<const int64_t> n(nodes.data(), nodes.shape(0));
  const std::span<const int64_t> e(edges.data(), edges.shape(0));
  nb::gil_scoped_release release;
  GraphFitScore score;
  Options out = FitFn(n, e, Order(order), fit, planner, &score);
  return {out, score};
}

// graph_fit.h: budgets fitted to a graph dataset's node and edge counts.
void BindGraphFit(nb::module_& m) {
  nb::class_<GraphFitOptions>(m, "GraphFitOptions")
      .def(nb::init<>())
      .def_rw("graphs", &GraphFitOptions::graphs)
      .def_rw("multiple", &GraphFitOptions::multiple)
      .def_rw("seed", &GraphFitOptions::seed);
  nb::class_<GraphFitScore>(m, "GraphFitScore")
      .def_ro("slot_share", &GraphFitScore::slot_share)
      .def_ro("graph_fill", &GraphFitScore::graph_fill)
      .def_ro("score", &GraphFitScore::score)
      .def_ro("candidates", &GraphFitScore::candidates);
  m.def("fit_graph_budget", Fit<GraphBudgetOptions, FitGraphBudget>, nb::arg("nodes"),
        nb::arg("edges"), nb::arg("order").none(), nb::arg("fit"), nb::arg("planner"));
  m.def("fit_graph_buckets", Fit<GraphBucketsOptions, FitGraphBuckets>, nb::arg("nodes"),
        nb::arg("edges"), nb::arg("order").none(), nb::arg("fit"), nb::arg("planner"));
}

}  // namespace

void BindPlan(nb::module_& m) {
  nb::enum_<Remainder>(m, "Remainder")
      .value("pad", Remainder::kPad)
      .value("keep", Remainder::kKeep)
      .value("drop", Remainder::kDrop);
  nb::enum_<TooLong>(m, "TooLong")
      .value("error", TooLong::kError)
      .value("truncate", TooLong::kTruncate)
      .value("skip", TooLong::kSkip)
      .value("split", TooLong::kSplit);
  nb::enum_<PackAlgorithm>(m, "PackAlgorithm")
      .value("first_fit", PackAlgorithm::kFirstFit)
      .value("best_fit", PackAlgorithm::kBestFit)
      .value("concat_then_split", PackAlgorithm::kConcatThenSplit);

  nb::enum_<GraphAlgorithm>(m, "GraphAlgorithm")
      .value("next_fit", GraphAlgorithm::kNextFit)
      .value("first_fit", GraphAlgorithm::kFirstFit)
      .value("best_fit", GraphAlgorithm::kBestFit);
  nb::enum_<TooBig>(m, "TooBig").value("error", TooBig::kError).value("skip", TooBig::kSkip);

  nb::class_<PadToMaxOptions>(m, "PadToMaxOptions")
      .def(nb::init<>())
      .def(nb::self == nb::self)
      .def_rw("batch_size", &PadToMaxOptions::batch_size)
      .def_rw("pad_to_multiple", &PadToMaxOptions::pad_to_multiple)
      .def_rw("remainder", &PadToMaxOptions::remainder)
      .def_rw("rows_multiple", &PadToMaxOptions::rows_multiple);
  nb::class_<FixedBucketsOptions>(m, "FixedBucketsOptions")
      .def(nb::init<>())
      .def(nb::self == nb::self)
      .def_rw("boundaries", &FixedBucketsOptions::boundaries)
      .def_rw("batch_size", &FixedBucketsOptions::batch_size)
      .def_rw("token_budget", &FixedBucketsOptions::token_budget)
      .def_rw("remainder", &FixedBucketsOptions::remainder)
      .def_rw("too_long", &FixedBucketsOptions::too_long)
      .def_rw("rows_multiple", &FixedBucketsOptions::rows_multiple)
      .def_rw("batch_sizes", &FixedBucketsOptions::batch_sizes);
  nb::class_<AutoBucketsOptions>(m, "AutoBucketsOptions")
      .def(nb::init<>())
      .def(nb::self == nb::self)
      .def_rw("max_shapes", &AutoBucketsOptions::max_shapes)
      .def_rw("token_budget", &AutoBucketsOptions::token_budget)
      .def_rw("batch_size", &AutoBucketsOptions::batch_size)
      .def_rw("pad_to_multiple", &AutoBucketsOptions::pad_to_multiple)
      .def_rw("remainder", &AutoBucketsOptions::remainder)
      .def_rw("rows_multiple", &AutoBucketsOptions::rows_multiple);
  nb::class_<PackOptions>(m, "PackOptions")
      .def(nb::init<>())
      .def(nb::self == nb::self)
      // An int, a list of a few row lengths (row_length_list; row_length is
      // its last), or a dict of each feature's row length (row_lengths).
      .def_prop_rw(
          "row_length",
          [](const PackOptions& o) -> nb::object {
            if (!o.row_length_list.empty()) return nb::cast(o.row_length_list);
            if (o.row_lengths.empty()) return nb::int_(o.row_length);
            return nb::cast(o.row_lengths);
          },
          [](PackOptions& o, nb::handle value) {
            o.row_lengths.clear();
            o.row_length_list.clear();
            if (nb::isinstance<nb::dict>(value)) {
              o.row_length = 0;
              o.row_lengths = nb::cast<std::map<std::string, int64_t>>(value);
            } else if (nb::isinstance<nb::list>(value)) {
              o.row_length_list = nb::cast<std::vector<int64_t>>(value);
              o.row_length = o.row_length_list.empty() ? 0 : o.row_length_list.back();
            } else {
              o.row_length = nb::cast<int64_t>(value);
            }
          },
          nb::for_getter(nb::sig("def row_length(self) -> int | list[int] | dict[str, int]")),
          nb::for_setter(
              nb::sig("def row_length(self, arg: int | list[int] | dict[str, int], /) -> None")))
      // None (0) beside a token_budget.
      .def_prop_rw(
          "rows_per_batch",
          [](const PackOptions& o) -> std::optional<int64_t> {
            if (o.rows_per_batch == 0) return std::nullopt;
            return o.rows_per_batch;
          },
          [](PackOptions& o, std::optional<int64_t> rows) { o.rows_per_batch = rows.value_or(0); })
      .def_rw("token_budget", &PackOptions::token_budget)
      .def_rw("max_shapes", &PackOptions::max_shapes)
      .def_rw("attention_percent", &PackOptions::attention_percent)
      .def_rw("max_segments_per_row", &PackOptions::max_segments_per_row)
      .def_rw("algorithm", &PackOptions::algorithm)
      .def_rw("lookahead", &PackOptions::lookahead)
      .def_rw("open_rows", &PackOptions::open_rows)
      .def_rw("too_long", &PackOptions::too_long)
      .def_rw("remainder", &PackOptions::remainder)
      .def_rw("rows_multiple", &PackOptions::rows_multiple);
  nb::enum_<PartialPatches>(m, "PartialPatches")
      .value("error", PartialPatches::kError)
      .value("pad", PartialPatches::kPad);
  nb::class_<PatchPackOptions>(m, "PatchPackOptions")
      .def(nb::init<>())
      .def(nb::self == nb::self)
      .def_rw("patch", &PatchPackOptions::patch)
      .def_rw("row_length", &PatchPackOptions::row_length)
      // None (0) beside a token_budget.
      .def_prop_rw(
          "rows_per_batch",
          [](const PatchPackOptions& o) -> std::optional<int64_t> {
            if (o.rows_per_batch == 0) return std::nullopt;
            return o.rows_per_batch;
          },
          [](PatchPackOptions& o, std::optional<int64_t> rows) {
            o.rows_per_batch = rows.value_or(0);
          })
      .def_rw("token_budget", &PatchPackOptions::token_budget)
      .def_rw("max_segments_per_row", &PatchPackOptions::max_segments_per_row)
      .def_rw("algorithm", &PatchPackOptions::algorithm)
      .def_rw("lookahead", &PatchPackOptions::lookahead)
      .def_rw("open_rows", &PatchPackOptions::open_rows)
      .def_rw("too_long", &PatchPackOptions::too_long)
      .def_rw("partial_patches", &PatchPackOptions::partial_patches)
      .def_rw("drop_percent", &PatchPackOptions::drop_percent)
      .def_rw("drop_seed", &PatchPackOptions::drop_seed)
      .def_rw("remainder", &PatchPackOptions::remainder)
      .def_rw("rows_multiple", &PatchPackOptions::rows_multiple);
  nb::class_<AspectBucketsOptions>(m, "AspectBucketsOptions")
      .def(nb::init<>())
      .def(nb::self == nb::self)
      .def_rw("area", &AspectBucketsOptions::area)
      .def_rw("multiple", &AspectBucketsOptions::multiple)
      .def_rw("ratios", &AspectBucketsOptions::ratios)  // (width, height) pairs, flat
      .def_rw("max_shapes", &AspectBucketsOptions::max_shapes)
      .def_rw("batch_size", &AspectBucketsOptions::batch_size)
      .def_rw("token_budget", &AspectBucketsOptions::token_budget)
      .def_rw("remainder", &AspectBucketsOptions::remainder)
      .def_rw("rows_multiple", &AspectBucketsOptions::rows_multiple);
  nb::class_<GraphBudgetOptions>(m, "GraphBudgetOptions")
      .def(nb::init<>())
      .def(nb::self == nb::self)
      .def_rw("nodes", &GraphBudgetOptions::nodes)
      .def_rw("edges", &GraphBudgetOptions::edges)
      .def_rw("graphs", &GraphBudgetOptions::graphs)
      .def_rw("algorithm", &GraphBudgetOptions::algorithm)
      .def_rw("open_batches", &GraphBudgetOptions::open_batches)
      .def_rw("too_big", &GraphBudgetOptions::too_big);
  nb::class_<GraphBucketsOptions>(m, "GraphBucketsOptions")
      .def(nb::init<>())
      .def(nb::self == nb::self)
      .def_rw("max_shapes", &GraphBucketsOptions::max_shapes)
      .def_rw("nodes", &GraphBucketsOptions::nodes)
      .def_rw("edges", &GraphBucketsOptions::edges)
      .def_rw("graphs", &GraphBucketsOptions::graphs)
      .def_rw("algorithm", &GraphBucketsOptions::algorithm)
      .def_rw("open_batches", &GraphBucketsOptions::open_batches)
      .def_rw("too_big", &GraphBucketsOptions::too_big);
  BindGraphFit(m);

  m.def("validate_planner", &ValidatePlannerOptions, nb::arg("options"));
  m.def("planner_name", &PlannerName, nb::arg("options"));
  m.def("planner_yields_pieces", &YieldsPieces, nb::arg("options"));
  m.def("planner_key", &PlannerKey, nb::arg("options"));
  m.def("parse_planner_key", &ParsePlannerKey, nb::arg("key"));

  // Pickled (a plan sent to a worker process) as a tuple of its fields.
  using StatsState =
      std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, double, int64_t, std::vector<int64_t>,
                 int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  nb::class_<PlanStats>(m, "PlanStats")
      .def("__getstate__",
           [](const PlanStats& s) {
             return StatsState(s.examples, s.batches, s.shapes, s.real_elements, s.padded_elements,
                               s.efficiency, s.occupied_elements, s.batches_per_shape, s.dropped,
                               s.skipped, s.truncated, s.real_edges, s.padded_edges, s.real_graphs,
                               s.padded_graphs);
           })
      .def("__setstate__",
           [](PlanStats& s, const StatsState& t) {
             new (&s) PlanStats();
             std::tie(s.examples, s.batches, s.shapes, s.real_elements, s.padded_elements,
                      s.efficiency, s.occupied_elements, s.batches_per_shape, s.dropped, s.skipped,
                      s.truncated, s.real_edges, s.padded_edges, s.real_graphs, s.padded_graphs) =
                 t;
           })
      .def_ro("examples", &PlanStats::examples)
      .def_ro("batches", &PlanStats::batches)
      .def_ro("shapes", &PlanStats::shapes)
      .def_ro("real_elements", &PlanStats::real_elements)
      .def_ro("padded_elements", &PlanStats::padded_elements)
      .def_ro("efficiency", &PlanStats::efficiency)
      .def_ro("occupied_elements", &PlanStats::occupied_elements)
      .def_ro("batches_per_shape", &PlanStats::batches_per_shape)
      .def_ro("dropped", &PlanStats::dropped)
      .def_ro("skipped", &PlanStats::skipped)
      .def_ro("truncated", &PlanStats::truncated)
      .def_ro("real_edges", &PlanStats::real_edges)
      .def_ro("padded_edges", &PlanStats::padded_edges)
      .def_ro("real_graphs", &PlanStats::real_graphs)
      .def_ro("padded_graphs", &PlanStats::padded_graphs);

  // Pickled as its flags, shapes, vectors and stats; unpickling checks
  // that they fit together (CheckPlan) before anything indexes with them.
  using Shapes = std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>;
  using PlanState =
      std::tuple<bool, bool, bool, std::string, Shapes, Int64Input, Int64Input, Int64Input,
                 Int64Input, Int64Input, Int64Input, PlanStats, bool, Int64Input, Int64Input,
                 Int64Input, std::vector<std::string>, std::vector<int64_t>, bool, Int64Input>;
  nb::class_<BatchPlan>(m, "BatchPlan")
      .def("__getstate__",
           [](const BatchPlan& p) {
             Shapes shapes;
             for (const BatchShape& s : p.shapes) shapes.push_back(ShapeToPython(s));
             std::vector<int64_t> shape_ids(p.batch_shape_ids.begin(), p.batch_shape_ids.end());
             return nb::make_tuple(
                 p.packed, p.graph, p.allow_truncate, p.length_column, shapes,
                 ToNumpy(std::move(shape_ids)), ToNumpy(p.batch_row_begin),
                 ToNumpy(p.row_example_begin), ToNumpy(p.example_ids), ToNumpy(p.dropped_examples),
                 ToNumpy(p.skipped_examples), p.stats, p.split, ToNumpy(p.example_pieces),
                 ToNumpy(p.piece_starts), ToNumpy(p.piece_lengths), p.feature_names,
                 p.feature_row_lengths, p.grid, ToNumpy(p.resize_to));
           })
      .def("__setstate__",
           [](BatchPlan& p, const PlanState& t) {
             const auto vec = [](const Int64Input& a) {
               return std::vector<int64_t>(a.data(), a.data() + a.shape(0));
             };
             BatchPlan plan;
             plan.packed = std::get<0>(t);
             plan.graph = std::get<1>(t);
             plan.allow_truncate = std::get<2>(t);
             plan.length_column = std::get<3>(t);
             for (const auto& [rows, length, segments, edges, width] : std::get<4>(t))
               plan.shapes.push_back({rows, length, segments, edges, width});
             for (int64_t id : vec(std::get<5>(t))) {
               if (id < 0 || id > INT32_MAX) {
                 throw InvalidArgumentError("BatchPlan: a batch's shape id is out of range");
               }
               plan.batch_shape_ids.push_back(static_cast<int32_t>(id));
             }
             plan.batch_row_begin = vec(std::get<6>(t));
             plan.row_example_begin = vec(std::get<7>(t));
             plan.example_ids = vec(std::get<8>(t));
             plan.dropped_examples = vec(std::get<9>(t));
             plan.skipped_examples = vec(std::get<10>(t));
             plan.stats = std::get<11>(t);
             plan.split = std::get<12>(t);
             plan.example_pieces = vec(std::get<13>(t));
             plan.piece_starts = vec(std::get<14>(t));
             plan.piece_lengths = vec(std::get<15>(t));
             plan.feature_names = std::get<16>(t);
             plan.feature_row_lengths = std::get<17>(t);
             plan.grid = std::get<18>(t);
             plan.resize_to = vec(std::get<19>(t));
             CheckPlan(plan);
             new (&p) BatchPlan(std::move(plan));
           })
      .def_ro("packed", &BatchPlan::packed)
      .def_ro("allow_truncate", &BatchPlan::allow_truncate)
      .def_ro("split", &BatchPlan::split)
      .def_ro("graph", &BatchPlan::graph)
      .def_ro("grid", &BatchPlan::grid)
      .def_rw("length_column", &BatchPlan::length_column)
      // Pack with several features: each feature's row length, by name.
      .def_prop_ro("feature_row_lengths",
                   [](const BatchPlan& p) {
                     std::map<std::string, int64_t> out;
                     for (size_t f = 0; f < p.feature_names.size(); ++f)
                       out.emplace(p.feature_names[f], p.feature_row_lengths[f]);
                     return out;
                   })
      .def_ro("stats", &BatchPlan::stats)
      .def_prop_ro("num_batches", &BatchPlan::num_batches)
      .def_prop_ro("shapes",
                   [](const BatchPlan& p) {
                     Shapes out;
                     for (const BatchShape& s : p.shapes) out.push_back(ShapeToPython(s));
                     return out;
                   })
      .def_prop_ro(
          "batch_shape_ids", [](const BatchPlan& p) { return View(p.batch_shape_ids); },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "batch_row_begin", [](const BatchPlan& p) { return View(p.batch_row_begin); },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "row_example_begin", [](const BatchPlan& p) { return View(p.row_example_begin); },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "example_ids", [](const BatchPlan& p) { return View(p.example_ids); },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "example_pieces", [](const BatchPlan& p) { return View(p.example_pieces); },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "piece_starts", [](const BatchPlan& p) { return View(p.piece_starts); },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "piece_lengths", [](const BatchPlan& p) { return View(p.piece_lengths); },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "dropped_examples", [](const BatchPlan& p) { return View(p.dropped_examples); },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "skipped_examples", [](const BatchPlan& p) { return View(p.skipped_examples); },
          nb::rv_policy::reference_internal)
      // AspectBuckets: each example's (h, w) target, flat; empty otherwise.
      .def_prop_ro(
          "resize_to", [](const BatchPlan& p) { return View(p.resize_to); },
          nb::rv_policy::reference_internal)
      .def("batch_shape",
           [](const BatchPlan& p, int64_t b) { return ShapeToPython(p.batch(b).shape); });

  m.def(
      "plan",
      [](Int64Input lengths, const PlannerOptions& options, std::optional<Int64Input> order,
         std::optional<Int64Input> edges, std::optional<Int64Input> widths) {
        const std::span<const int64_t> l(lengths.data(), lengths.shape(0));
        const std::span<const int64_t> e = Span(edges), w = Span(widths);
        const PlanOrder o = Order(order);
        nb::gil_scoped_release release;
        return Plan(l, options, o, e, w);
      },
      nb::arg("lengths"), nb::arg("options"), nb::arg("order").none() = nb::none(),
      nb::arg("edges").none() = nb::none(), nb::arg("widths").none() = nb::none());
  // grid_buckets.h's shape choice with a fixed rows per batch, for tests
  // that compare it with a brute-force reference: (shapes, cost, exact).
  m.def(
      "choose_grid_shapes",
      [](Int64Input heights, Int64Input widths, int64_t max_shapes, int64_t rows,
         bool pad_remainder, int64_t max_evaluations) {
        const std::span<const int64_t> h(heights.data(), heights.shape(0));
        const std::span<const int64_t> w(widths.data(), widths.shape(0));
        if (rows <= 0) throw InvalidArgumentError(StrCat("choose_grid_shapes: rows=", rows));
        nb::gil_scoped_release release;
        const GridChoice choice = ChooseGridShapes(
            h, w, max_shapes,
            [&](int64_t a, int64_t b, int64_t n) {
              return BucketCost(SaturatingMul(a, b), n, rows, pad_remainder);
            },
            max_evaluations);
        std::vector<std::pair<int64_t, int64_t>> shapes;
        for (const GridShape& s : choice.shapes) shapes.emplace_back(s.height, s.width);
        return std::make_tuple(shapes, choice.cost, choice.exact);
      },
      nb::arg("heights"), nb::arg("widths"), nb::arg("max_shapes"), nb::arg("rows"),
      nb::arg("pad_remainder"), nb::arg("max_evaluations"));
  m.def(
      "replan_graphs_halved",
      [](Int64Input nodes, Int64Input edges, Int64Input ids, int64_t graphs, int64_t node_slots,
         int64_t edge_slots) {
        const std::span<const int64_t> n(nodes.data(), nodes.shape(0));
        const std::span<const int64_t> e(edges.data(), edges.shape(0));
        const std::vector<int64_t> i(ids.data(), ids.data() + ids.shape(0));
        nb::gil_scoped_release release;
        return ReplanGraphsHalved(
            n, e, i, BatchShape{.rows = graphs, .length = node_slots, .edges = edge_slots});
      },
      nb::arg("nodes"), nb::arg("edges"), nb::arg("ids"), nb::arg("graphs"), nb::arg("node_slots"),
      nb::arg("edge_slots"));
}

}  // namespace jaxbatch::bindings
