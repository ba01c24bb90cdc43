// The names of what collation adds beside a dataset's columns: the one
// place they are spelled. Collation (collate/collator.h) writes them, the
// Dataset refuses a column that one of them would overwrite, and the Python
// layer reads them through the binding.
//
// Example: a ragged column "tokens" gets "tokens_mask" and "tokens_lengths"
// in a padded batch, and every batch gets "example_index".
#ifndef JAXBATCH_DATA_OUTPUT_NAMES_H_
#define JAXBATCH_DATA_OUTPUT_NAMES_H_

#include <string_view>

namespace jaxbatch {

// Suffixes of what collation adds for a ragged column k: `<k><suffix>`.
inline constexpr std::string_view kMaskSuffix = "_mask";
inline constexpr std::string_view kLengthsSuffix = "_lengths";
inline constexpr std::string_view kSegmentIdsSuffix = "_segment_ids";
inline constexpr std::string_view kPositionsSuffix = "_positions";
inline constexpr std::string_view kSegmentStartsSuffix = "_segment_starts";  // packed only
// A PatchPack batch's (collate/patch_collate.h): each patch's real pixels
// [rows, L] and each image's patch count [rows, S]. Not in kOutputSuffixes:
// only an image column has them.
inline constexpr std::string_view kPixelsSuffix = "_pixels";
inline constexpr std::string_view kPatchesSuffix = "_patches";
// Every suffix above, for the checks that must consider them all.
inline constexpr std::string_view kOutputSuffixes[] = {
    kLengthsSuffix, kMaskSuffix, kSegmentIdsSuffix, kPositionsSuffix, kSegmentStartsSuffix};

// Every batch's: each row's (packed: each segment's) example, -1 for padding.
inline constexpr std::string_view kExampleIndexName = "example_index";
// A split plan's (Pack too_long="split"): [rows, S] int64, which piece of
// its example (example_index) each segment is, from 0; -1 for padding.
inline constexpr std::string_view kExamplePieceName = "example_piece";
// A graph batch's (see CollateGraphs).
inline constexpr std::string_view kNodeMaskName = "node_mask";
inline constexpr std::string_view kEdgeMaskName = "edge_mask";
inline constexpr std::string_view kGraphMaskName = "graph_mask";
inline constexpr std::string_view kNodeGraphName = "node_graph";
inline constexpr std::string_view kGraphIndexName = "graph_index";
// A mixture's batches (load/mixture.h): beside example_index (graph_index),
// int32 of its shape, the source of each row or segment, -1 for padding;
// example_index then numbers examples within their source.
inline constexpr std::string_view kSourceIndexName = "source_index";

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_OUTPUT_NAMES_H_
