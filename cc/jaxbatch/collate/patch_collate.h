// Patch collation (NaViT): the images of a PatchPack batch cut into patches
// and laid into rows, in C++ (no per-image or per-patch Python).
//
// For an image column k of pixels [h, w, *inner] and a batch of shape
// rows x L patches with S segments per row (plan/patch_pack.h):
//   k               [rows, L, ph * pw * prod(inner)]  each patch flattened
//                   as [ph, pw, *inner] (einops' "(h p1) (w p2) c ->
//                   (h w) (p1 p2 c)"); padding patches and the padded part
//                   of a partial patch hold the pad value
//   k_segment_ids   [rows, L]    int32: 1..n for the row's images, 0 padding
//   k_positions     [rows, L, 2] int32: (patch row, patch column) in its
//                   image (a split piece's keep the image's rows); 0 padding
//   k_pixels        [rows, L]    int32: real pixels of each patch (ph * pw
//                   but for a partial patch under partial_patches="pad")
//   k_patches       [rows, S]    int32: each segment's patch count, 0 unused
//   example_index   [rows, S]    int64: each segment's image, -1 unused
//   example_piece   [rows, S]    int64, split plans only: which piece
// Under drop_percent a segment holds its image's kept patches
// (KeptPatchIds for the batch's epoch), in raster order.
//
// Example:
//   auto image = [&](int64_t i) { return PatchImage{pixels[i].data(), h[i], w[i]}; };
//   std::vector<Array> arrays = CollatePatches(image, {"image", DType::kUInt8, {3}},
//                                              plan.batch(0), options, 0, {});
#ifndef JAXBATCH_COLLATE_PATCH_COLLATE_H_
#define JAXBATCH_COLLATE_PATCH_COLLATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dtype.h"
#include "jaxbatch/data/ragged_column.h"
#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/patch_pack.h"

namespace jaxbatch {

// One image: height x width pixels of the column's inner shape, row-major,
// back to back from `data`.
struct PatchImage {
  const uint8_t* data = nullptr;
  int64_t height = 0;
  int64_t width = 0;
};

// The image column: its name, dtype and per-pixel inner shape.
struct PatchColumn {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> inner_shape;
};

// Returns image `example` (called once per segment, from the collating thread(s)).
using PatchImages = std::function<PatchImage(int64_t example)>;

// Collates `view`, a batch of a PatchPack plan of `o`, made in epoch
// `epoch` (which patches drop_percent keeps). Throws InvalidArgumentError
// when an image has more patches than its row has room (a plan made from
// other sizes) or a size not a multiple of the patch under "error", and
// when the pad value does not fit the dtype.
std::vector<Array> CollatePatches(const PatchImages& images, const PatchColumn& column,
                                  const BatchView& view, const PatchPackOptions& o, int64_t epoch,
                                  const CollateOptions& options);

// CollatePatches over a grid column (RaggedColumn::Grid) whose cells are
// pixels of its inner shape. Throws InvalidArgumentError naming the column
// when it is not a grid column.
std::vector<Array> CollatePatchColumn(const RaggedColumn& column, const BatchView& view,
                                      const PatchPackOptions& o, int64_t epoch,
                                      const CollateOptions& options);

// Bytes of every array CollatePatches returns for a batch of `shape`.
int64_t PatchCollatedBytes(const PatchColumn& column, const BatchShape& shape,
                           const PatchPackOptions& o, bool split);

}  // namespace jaxbatch

#endif  // JAXBATCH_COLLATE_PATCH_COLLATE_H_
