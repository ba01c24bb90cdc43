// Binds data/: RaggedColumn and Dataset (and base/'s FileStamp, which stamps the
// files a dataset is read from).
#include <nanobind/operators.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <span>

#include "bindings.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/base/file_stamp.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/graph.h"
#include "jaxbatch/data/ragged_column.h"
#include "jaxbatch/data/view.h"

namespace jaxbatch::bindings {
namespace {

// Holds Python objects for the core; drops them with the GIL held, from
// whichever thread releases the last reference.
Keepalive HoldPython(nb::object owner) {
  auto* held = new nb::object(std::move(owner));
  return Keepalive(held, [](const nb::object* o) {
    nb::gil_scoped_acquire gil;
    delete o;
  });
}

RaggedColumn MakeRagged(std::string name, const std::string& dtype,
                        std::vector<int64_t> inner_shape, ByteInput values, Int64Input offsets,
                        nb::object owner) {
  const DType parsed = ParseDType(dtype, "column '" + name + "'");
  return RaggedColumn::Ragged(std::move(name), parsed, std::move(inner_shape),
                              {values.data(), values.shape(0)}, {offsets.data(), offsets.shape(0)},
                              HoldPython(std::move(owner)));
}

RaggedColumn MakeFixed(std::string name, const std::string& dtype, std::vector<int64_t> inner_shape,
                       ByteInput values, int64_t num_examples, nb::object owner) {
  const DType parsed = ParseDType(dtype, "column '" + name + "'");
  return RaggedColumn::Fixed(std::move(name), parsed, std::move(inner_shape),
                             {values.data(), values.shape(0)}, num_examples,
                             HoldPython(std::move(owner)));
}

// chunks: (uint8 view of the values, int64 offsets (empty when fixed),
// examples) per chunk; order: the examples' order (None: as they are).
RaggedColumn MakeGathered(std::string name, const std::string& dtype,
                          std::vector<int64_t> inner_shape, bool fixed,
                          const std::vector<std::tuple<ByteInput, Int64Input, int64_t>>& chunks,
                          std::optional<Int64Input> order, nb::object owner) {
  const DType parsed = ParseDType(dtype, "column '" + name + "'");
  std::vector<RaggedColumn::Chunk> core;
  core.reserve(chunks.size());
  for (const auto& [values, offsets, num_examples] : chunks) {
    core.push_back(
        {{values.data(), values.shape(0)}, {offsets.data(), offsets.shape(0)}, num_examples});
  }
  std::optional<std::span<const int64_t>> ordered;
  if (order) ordered.emplace(order->data(), order->shape(0));
  Keepalive keep = HoldPython(std::move(owner));
  nb::gil_scoped_release release;
  return RaggedColumn::Gathered(std::move(name), parsed, std::move(inner_shape), fixed, core,
                                ordered, std::move(keep));
}

// pieces: (uint8 view, dtype name, shape) per example.
RaggedColumn MakeFromPieces(
    std::string name, const std::string& dtype, std::vector<int64_t> inner_shape, bool fixed,
    const std::vector<std::tuple<ByteInput, std::string, std::vector<int64_t>>>& pieces) {
  const DType parsed = ParseDType(dtype, "column '" + name + "'");
  std::vector<RaggedColumn::Piece> core;
  core.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& [data, piece_dtype, shape] = pieces[i];
    core.push_back({data.data(),
                    ParseDType(piece_dtype, "column '" + name + "', example " + std::to_string(i)),
                    shape});
  }
  nb::gil_scoped_release release;
  return RaggedColumn::FromPieces(std::move(name), parsed, std::move(inner_shape), fixed, core);
}

// cells as a grid column: shapes is [num_examples, 2] (h, w) flattened.
RaggedColumn MakeGrid(RaggedColumn cells, Int64Input shapes) {
  std::vector<int64_t> flat(shapes.data(), shapes.data() + shapes.shape(0));
  nb::gil_scoped_release release;
  return RaggedColumn::Grid(std::move(cells), std::move(flat));
}

using StampState = std::tuple<uint64_t, uint64_t, int64_t, int64_t, int64_t>;

StampState StampTuple(const FileStamp& s) {
  return {s.device, s.inode, s.size, s.modified_ns, s.changed_ns};
}

// FileStamp pickles (a pickled file-backed dataset carries its files' stamps).
void BindFileStamp(nb::module_& m) {
  nb::class_<FileStamp>(m, "FileStamp")
      .def_ro("device", &FileStamp::device)
      .def_ro("inode", &FileStamp::inode)
      .def_ro("size", &FileStamp::size)
      .def_ro("modified_ns", &FileStamp::modified_ns)
      .def_ro("changed_ns", &FileStamp::changed_ns)
      .def("same_file", &FileStamp::SameFile, nb::arg("other"))
      .def("describe_change", &DescribeChange, nb::arg("now"))
      .def(nb::self == nb::self)
      .def("__getstate__", &StampTuple)
      .def("__setstate__",
           [](FileStamp& s, const StampState& t) {
             new (&s) FileStamp{std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t),
                                std::get<4>(t)};
           })
      .def("__repr__", [](const FileStamp& s) {
        return StrCat("FileStamp(device=", s.device, ", inode=", s.inode, ", size=", s.size,
                      ", modified_ns=", s.modified_ns, ", changed_ns=", s.changed_ns, ")");
      });
  m.def("stamp_file", &StampFile, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace

void BindData(nb::module_& m) {
  BindFileStamp(m);
  nb::class_<RaggedColumn>(m, "RaggedColumn")
      .def_static("ragged", &MakeRagged, nb::arg("name"), nb::arg("dtype"), nb::arg("inner_shape"),
                  nb::arg("values"), nb::arg("offsets"), nb::arg("owner"))
      .def_static("fixed", &MakeFixed, nb::arg("name"), nb::arg("dtype"), nb::arg("inner_shape"),
                  nb::arg("values"), nb::arg("num_examples"), nb::arg("owner"))
      .def_static("gathered", &MakeGathered, nb::arg("name"), nb::arg("dtype"),
                  nb::arg("inner_shape"), nb::arg("fixed"), nb::arg("chunks"),
                  nb::arg("order").none(), nb::arg("owner"))
      .def_static("from_pieces", &MakeFromPieces, nb::arg("name"), nb::arg("dtype"),
                  nb::arg("inner_shape"), nb::arg("fixed"), nb::arg("pieces"))
      .def_static("grid", &MakeGrid, nb::arg("cells"), nb::arg("shapes"))
      .def_static("with_axes", &RaggedColumn::WithAxes, nb::arg("column"), nb::arg("axes"))
      .def_prop_ro("is_grid", &RaggedColumn::is_grid)
      .def_prop_ro("axes", &RaggedColumn::axes)
      .def("heights", [](const RaggedColumn& c) { return ToNumpy(c.Heights()); })
      .def("widths", [](const RaggedColumn& c) { return ToNumpy(c.Widths()); })
      .def_prop_ro("name", &RaggedColumn::name)
      .def_prop_ro("dtype", [](const RaggedColumn& c) { return std::string(DTypeName(c.dtype())); })
      .def_prop_ro("inner_shape", &RaggedColumn::inner_shape)
      .def_prop_ro("is_fixed", &RaggedColumn::is_fixed)
      .def_prop_ro("num_examples", &RaggedColumn::num_examples)
      .def_prop_ro("max_length", &RaggedColumn::max_length)
      .def("lengths", [](const RaggedColumn& c) { return ToNumpy(c.Lengths()); })
      .def("copy_values",
           [](const RaggedColumn& c) {
             std::shared_ptr<std::vector<uint8_t>> owned;
             {
               nb::gil_scoped_release release;
               owned = std::make_shared<std::vector<uint8_t>>(c.CopyValues());
             }
             const auto size = static_cast<int64_t>(owned->size());
             return WrapArray(owned->data(), DType::kUInt8, {size}, owned);
           })
      .def(
          "example",
          [](const RaggedColumn& c, int64_t i) {
            if (i < 0 || i >= c.num_examples()) {
              throw OutOfRangeError("column '" + c.name() + "': example " + std::to_string(i) +
                                    " out of range; the column has " +
                                    std::to_string(c.num_examples()) + " examples");
            }
            // A read-only byte view of the example (the Python layer reshapes it).
            const size_t bytes = static_cast<size_t>(c.length(i) * c.row_bytes());
            return nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>(c.example_data(i), {bytes},
                                                                      nb::handle());
          },
          nb::rv_policy::reference_internal);

  nb::class_<Dataset>(m, "Dataset")
      .def(nb::init<std::vector<RaggedColumn>, std::vector<std::vector<std::string>>, int64_t>(),
           nb::arg("columns"), nb::arg("aligned"), nb::arg("first_example") = 0)
      .def_prop_ro("num_examples", &Dataset::num_examples)
      .def_prop_ro("view_key", &Dataset::view_key)
      .def_prop_ro("aligned_groups", &Dataset::aligned_groups)
      .def_prop_ro("default_length_column", &Dataset::default_length_column)
      .def("column_names",
           [](const Dataset& d) {
             std::vector<std::string> names;
             for (const RaggedColumn& c : d.columns()) names.push_back(c.name());
             return names;
           })
      .def("column", &Dataset::column, nb::rv_policy::reference_internal)
      .def("are_aligned", &Dataset::AreAligned)
      .def(
          "is_tied_square",
          [](const Dataset& d, std::string_view grid, std::string_view length_column) {
            return d.IsTiedSquare(d.column(grid), length_column);
          },
          nb::arg("grid"), nb::arg("length_column"));
  m.def(
      "select_examples",
      [](const Dataset& base, Int64Input index) {
        const std::span<const int64_t> taken(index.data(), index.shape(0));
        nb::gil_scoped_release release;
        return SelectExamples(base, taken);
      },
      nb::arg("base"), nb::arg("index"));
  m.def("slice_examples", &SliceExamples, nb::arg("base"), nb::arg("begin"), nb::arg("end"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("shard_examples", &ShardExamples, nb::arg("base"), nb::arg("index"), nb::arg("count"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def(
      "concat_datasets",
      [](const std::vector<const Dataset*>& parts) {
        nb::gil_scoped_release release;
        return ConcatDatasets(parts);
      },
      nb::arg("parts"));
  m.attr("GRAPH_NODES") = kNodesName;
  m.attr("GRAPH_EDGES") = kEdgesName;
  m.attr("GRAPH_GLOBALS") = kGlobalsName;
  m.attr("GRAPH_SENDERS") = kSendersName;
  m.attr("GRAPH_RECEIVERS") = kReceiversName;
  m.attr("GRAPH_N_NODE") = kNodeCountName;
  m.attr("GRAPH_N_EDGE") = kEdgeCountName;
  m.def("is_graph_dataset", &IsGraphDataset, nb::arg("dataset"));
  m.def(
      "graph_columns",
      [](const Dataset& dataset, const std::string& who) {
        const GraphColumns graph = FindGraphColumns(dataset, who);
        return nb::make_tuple(graph.nodes, graph.edges, graph.globals);
      },
      nb::arg("dataset"), nb::arg("who"));
  m.def(
      "graph_counts",
      [](const Dataset& dataset, const std::string& who) {
        const GraphColumns graph = FindGraphColumns(dataset, who);
        return nb::make_tuple(ToNumpy(NodeCounts(dataset, graph)), ToNumpy(EdgeCounts(dataset)));
      },
      nb::arg("dataset"), nb::arg("who"));
  m.def(
      "find_bad_graphs",
      [](const Dataset& dataset, const std::string& who) {
        std::vector<std::pair<int64_t, std::string>> out;
        for (GraphProblem& p : FindBadGraphs(dataset, FindGraphColumns(dataset, who))) {
          out.emplace_back(p.example, std::move(p.reason));
        }
        return out;
      },
      nb::arg("dataset"), nb::arg("who"));
}

}  // namespace jaxbatch::bindings
