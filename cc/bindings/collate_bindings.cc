// Binds collate/: Collate() returning numpy arrays that own C++ buffers.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/collate/patch_batch.h"

namespace jaxbatch::bindings {

void BindCollate(nb::module_& m) {
  m.attr("MASK_SUFFIX") = std::string(kMaskSuffix);
  m.attr("LENGTHS_SUFFIX") = std::string(kLengthsSuffix);
  m.attr("SEGMENT_IDS_SUFFIX") = std::string(kSegmentIdsSuffix);
  m.attr("POSITIONS_SUFFIX") = std::string(kPositionsSuffix);
  m.attr("SEGMENT_STARTS_SUFFIX") = std::string(kSegmentStartsSuffix);
  m.attr("PIXELS_SUFFIX") = std::string(kPixelsSuffix);
  m.attr("PATCHES_SUFFIX") = std::string(kPatchesSuffix);
  m.attr("EXAMPLE_INDEX") = std::string(kExampleIndexName);
  m.attr("EXAMPLE_PIECE") = std::string(kExamplePieceName);
  m.attr("SOURCE_INDEX") = std::string(kSourceIndexName);
  m.attr("NODE_MASK") = std::string(kNodeMaskName);
  m.attr("EDGE_MASK") = std::string(kEdgeMaskName);
  m.attr("GRAPH_MASK") = std::string(kGraphMaskName);
  m.attr("NODE_GRAPH") = std::string(kNodeGraphName);
  m.attr("GRAPH_INDEX") = std::string(kGraphIndexName);
  m.def(
      "check_pad_values",
      [](const Dataset& dataset, std::vector<std::pair<std::string, Scalar>> pad_values,
         std::string_view who) {
        CheckPadValues(dataset, CollateOptions{.pad_values = std::move(pad_values)}, who);
      },
      nb::arg("dataset"), nb::arg("pad_values"), nb::arg("who"));
  m.attr("DEFAULT_PADDED_SEGMENTS") = kDefaultPaddedSegments;
  m.attr("DEFAULT_PAD_VALUE") = kDefaultPadValue;
  m.def(
      "collate",
      [](const Dataset& dataset, const BatchPlan& plan, int64_t batch_index,
         std::vector<std::pair<std::string, Scalar>> pad_values, Scalar default_pad_value,
         int64_t num_threads, bool padded_segments) {
        CollateOptions options{.pad_values = std::move(pad_values),
                               .default_pad_value = default_pad_value,
                               .num_threads = num_threads,
                               .padded_segments = padded_segments};
        std::vector<Array> arrays;
        {
          nb::gil_scoped_release release;
          arrays = Collate(dataset, plan, batch_index, options);
        }
        return ArrayList(arrays);
      },
      nb::arg("dataset"), nb::arg("plan"), nb::arg("batch_index"), nb::arg("pad_values"),
      nb::arg("default_pad_value"), nb::arg("num_threads"),
      nb::arg("padded_segments") = kDefaultPaddedSegments);
  m.def(
      "collate_patches",
      [](const Dataset& dataset, std::string_view column, const BatchPlan& plan,
         int64_t batch_index, const PatchPackOptions& patch_pack, int64_t epoch,
         std::vector<std::pair<std::string, Scalar>> pad_values, Scalar default_pad_value,
         int64_t num_threads) {
        CollateOptions options{.pad_values = std::move(pad_values),
                               .default_pad_value = default_pad_value,
                               .num_threads = num_threads};
        std::vector<Array> arrays;
        {
          nb::gil_scoped_release release;
          arrays = CollatePatchBatch(dataset, column, plan.batch(batch_index), patch_pack, epoch,
                                     options);
        }
        return ArrayList(arrays);
      },
      nb::arg("dataset"), nb::arg("column"), nb::arg("plan"), nb::arg("batch_index"),
      nb::arg("patch_pack"), nb::arg("epoch"), nb::arg("pad_values"), nb::arg("default_pad_value"),
      nb::arg("num_threads"));
}

}  // namespace jaxbatch::bindings
