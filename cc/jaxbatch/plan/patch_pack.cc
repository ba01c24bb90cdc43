#include "jaxbatch/plan/patch_pack.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/load/index_shuffle.h"
#include "jaxbatch/plan/balance.h"
#include "jaxbatch/plan/pack_features.h"
#include "jaxbatch/plan/pack_lengths.h"

namespace jaxbatch {
namespace {

constexpr const char* kName = "PatchPack";
constexpr uint64_t kDropSalt = 0x64726f70ull;  // "drop"

void Positive(int64_t value, const char* option) {
  if (value <= 0) {
    throw InvalidArgumentError(
        StrCat(kName, ": ", option, " must be a positive integer, found ", value));
  }
}

void PositiveIfSet(const std::optional<int64_t>& value, const char* option) {
  if (value && *value <= 0) {
    throw InvalidArgumentError(StrCat(kName, ": ", option, " must be a positive integer, found ",
                                      *value, " (leave it unset for none)"));
  }
}

void ValidatePatch(const std::vector<int64_t>& patch) {
  if (patch.size() != 2) {
    throw InvalidArgumentError(
        StrCat(kName, ": patch must be (height, width), found ", patch.size(), " sizes"));
  }
  Positive(patch[0], "patch[0]");
  Positive(patch[1], "patch[1]");
  // A patch's real pixels are counted in <column>_pixels, one int32 a patch.
  const std::optional<int64_t> pixels = CheckedMul(patch[0], patch[1]);
  if (!pixels || *pixels > kMaxExtent) {
    throw InvalidArgumentError(
        StrCat(kName, ": patch ", patch[0], " x ", patch[1], " has ",
               pixels ? StrCat(*pixels) : StrCat("more than ", kMaxSize), " pixels; at most ",
               kMaxExtent, " fit a patch, as the batch's int32 <column>_pixels counts them"));
  }
}

void ValidatePolicies(const PatchPackOptions& o) {
  if (o.too_long == TooLong::kTruncate) {
    throw InvalidArgumentError(
        StrCat(kName,
               ": too_long=\"truncate\" would drop an image's pixels with no trace in it; "
               "use \"error\", \"skip\" or \"split\" (whole patch rows)"));
  }
  if (o.algorithm == PackAlgorithm::kConcatThenSplit) {
    throw InvalidArgumentError(StrCat(kName,
                                      ": algorithm must be \"first_fit\" or \"best_fit\", "
                                      "found \"concat_then_split\""));
  }
  if (o.drop_percent < 0 || o.drop_percent >= kMaxDropPercent) {
    throw InvalidArgumentError(StrCat(kName, ": drop_percent must be in [0, ", kMaxDropPercent,
                                      "), found ", o.drop_percent));
  }
  if (o.too_long == TooLong::kSplit && o.drop_percent > 0) {
    throw InvalidArgumentError(StrCat(kName,
                                      ": too_long=\"split\" with drop_percent=", o.drop_percent,
                                      " is refused: a piece's kept patches would depend on the "
                                      "other pieces'; use one or the other"));
  }
  if (o.too_long == TooLong::kSplit && o.remainder == Remainder::kDrop) {
    throw InvalidArgumentError(
        StrCat(kName,
               ": too_long=\"split\" with remainder=\"drop\" would drop some pieces of an image "
               "whose other pieces are yielded; use remainder=\"pad\" or \"keep\""));
  }
  if (o.open_rows && o.lookahead) {
    throw InvalidArgumentError(StrCat(kName, ": give lookahead (", *o.lookahead, ") or open_rows (",
                                      *o.open_rows, "), not both"));
  }
}

[[noreturn]] void ThrowTooMany(int64_t id, const PatchGrid& g, const PatchPackOptions& o,
                               const char* why) {
  throw InvalidArgumentError(StrCat(kName, ": image ", id, " has ", g.rows, " x ", g.cols, " = ",
                                    g.count(), " patches of ", o.patch[0], " x ", o.patch[1],
                                    ", more than row_length=", o.row_length, why));
}

// Whether image `id` of `grid` is planned: too_long applied (skip counts
// it; split needs one whole patch row to fit a row).
bool Admit(int64_t id, const PatchGrid& grid, const PatchPackOptions& o, PlanBuilder& builder) {
  if (KeptPatchCount(grid.count(), o.drop_percent) <= o.row_length) return true;
  switch (o.too_long) {
    case TooLong::kSkip:
      builder.Skip(id);
      return false;
    case TooLong::kSplit:
      if (grid.cols > o.row_length) {
        ThrowTooMany(id, grid, o, "; too_long=\"split\" cuts whole patch rows, and one is wider");
      }
      return true;
    default:
      ThrowTooMany(id, grid, o, "; pass too_long=\"skip\" or \"split\" to allow it");
  }
}

// Under too_long="split" the packer sees pieces of whole patch rows: piece
// i is piece `piece[i]` of image `example[i]`, patches [start[i], start[i] +
// lengths[i]) of it in raster order.
struct Pieces {
  std::vector<int64_t> lengths, example, piece, start;
};

void AddPieces(int64_t id, const PatchGrid& grid, const PatchPackOptions& o, Pieces& p) {
  const bool fits = grid.count() <= o.row_length;
  const int64_t per_piece = fits ? grid.rows : PatchRowsPerPiece(grid.cols, o.row_length);
  int64_t k = 0;
  for (int64_t row = 0; row < grid.rows || k == 0; ++k, row += per_piece) {
    p.lengths.push_back(std::min(per_piece, grid.rows - row) * grid.cols);
    p.example.push_back(id);
    p.piece.push_back(k);
    p.start.push_back(row * grid.cols);
    if (per_piece == 0) break;  // an image of no patches: one empty piece
  }
}

void CheckSizes(std::span<const int64_t> heights, std::span<const int64_t> widths) {
  if (widths.empty() && !heights.empty()) {
    throw InvalidArgumentError(
        StrCat(kName, ": plans images by height and width, found ", heights.size(),
               " lengths and no widths; plan an image column (axes=('h', 'w')) or [n, 2] sizes"));
  }
  if (heights.size() != widths.size()) {
    throw InvalidArgumentError(StrCat(kName, ": expected a width for each of the ", heights.size(),
                                      " images, found ", widths.size(), " widths"));
  }
}

// Adds packed row `r`: its images, or under split its pieces' images,
// pieces and patch spans.
void AddPatchRow(const PackedRows& rows, int64_t r, const Pieces* pieces, PlanBuilder& builder) {
  const auto begin = static_cast<size_t>(rows.row_begin[static_cast<size_t>(r)]);
  const auto end = static_cast<size_t>(rows.row_begin[static_cast<size_t>(r) + 1]);
  const std::span<const int64_t> row =
      std::span<const int64_t>(rows.example_ids).subspan(begin, end - begin);
  if (pieces == nullptr) return builder.AddRow(row);
  std::vector<int64_t> examples, piece, starts, lengths;
  for (int64_t item : row) {
    const auto i = static_cast<size_t>(item);
    examples.push_back(pieces->example[i]);
    piece.push_back(pieces->piece[i]);
    starts.push_back(pieces->start[i]);
    lengths.push_back(pieces->lengths[i]);
  }
  builder.AddRow(examples, piece, starts, lengths);
}

}  // namespace

void ValidatePatchPack(const PatchPackOptions& o) {
  ValidatePatch(o.patch);
  Positive(o.row_length, "row_length");
  CheckExtent(o.row_length, kName, "row_length", "segment ids and positions");
  PositiveIfSet(o.token_budget, "token_budget");
  Positive(o.rows_multiple, "rows_multiple");
  if (o.token_budget && o.rows_per_batch != 0) {
    throw InvalidArgumentError(StrCat(kName, ": give rows_per_batch (", o.rows_per_batch,
                                      ") or token_budget (", *o.token_budget, "), not both"));
  }
  if (!o.token_budget) {
    Positive(o.rows_per_batch, "rows_per_batch");
    if (o.rows_per_batch % o.rows_multiple != 0) {
      throw InvalidArgumentError(StrCat(kName, ": rows_per_batch=", o.rows_per_batch,
                                        " is not a multiple of rows_multiple=", o.rows_multiple));
    }
  }
  PatchRowsPerBatch(o);
  PositiveIfSet(o.max_segments_per_row, "max_segments_per_row");
  if (o.max_segments_per_row) {
    CheckExtent(*o.max_segments_per_row, kName, "max_segments_per_row", "segment ids");
  }
  PositiveIfSet(o.lookahead, "lookahead");
  PositiveIfSet(o.open_rows, "open_rows");
  ValidatePolicies(o);
  const int64_t rows = PatchRowsPerBatch(o);
  const int64_t segments = o.max_segments_per_row.value_or(o.row_length);
  if (!CheckedMul(rows, o.row_length) || !CheckedMul(rows, segments)) {
    throw InvalidArgumentError(StrCat(kName, ": ", rows, " rows of row_length=", o.row_length,
                                      " make a batch past ", kMaxSize, " patches"));
  }
}

int64_t PatchRowsPerBatch(const PatchPackOptions& o) {
  if (!o.token_budget) return o.rows_per_batch;
  const int64_t rows = *o.token_budget / o.row_length / o.rows_multiple * o.rows_multiple;
  if (rows == 0) {
    throw InvalidArgumentError(StrCat(
        kName, ": token_budget=", *o.token_budget, " holds no row of row_length=", o.row_length,
        o.rows_multiple > 1 ? StrCat(" x rows_multiple=", o.rows_multiple) : std::string()));
  }
  return rows;
}

PatchGrid PatchGridOf(int64_t height, int64_t width, const PatchPackOptions& o, int64_t example) {
  if (height < 0 || width < 0) {
    throw InvalidArgumentError(StrCat(kName, ": image ", example, " has size ", height, " x ",
                                      width, "; expected sizes >= 0"));
  }
  const int64_t ph = o.patch[0], pw = o.patch[1];
  if (o.partial_patches == PartialPatches::kError && (height % ph != 0 || width % pw != 0)) {
    throw InvalidArgumentError(StrCat(
        kName, ": image ", example, " is ", height, " x ", width,
        " pixels, not a multiple of the patch ", ph, " x ", pw,
        "; pass partial_patches=\"pad\" to pad its last patch row and column (jaxbatch never "
        "resizes), or crop it to ",
        height / ph * ph, " x ", width / pw * pw));
  }
  const PatchGrid grid{(height + ph - 1) / ph, (width + pw - 1) / pw};
  if (!CheckedMul(grid.rows, grid.cols)) {
    throw InvalidArgumentError(
        StrCat(kName, ": image ", example, " has more patches than ", kMaxSize));
  }
  return grid;
}

int64_t KeptPatchCount(int64_t patches, int64_t drop_percent) {
  if (patches == 0 || drop_percent == 0) return patches;
  // patches * drop_percent may wrap for an absurd image: divide first.
  const int64_t dropped = patches / 100 * drop_percent + patches % 100 * drop_percent / 100;
  return std::max<int64_t>(1, patches - dropped);
}

std::vector<int64_t> KeptPatchIds(int64_t patches, const PatchPackOptions& o, int64_t epoch,
                                  int64_t example) {
  const int64_t kept = KeptPatchCount(patches, o.drop_percent);
  std::vector<int64_t> ids(static_cast<size_t>(kept));
  if (kept == patches) {
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
  }
  const uint64_t seed = Mix64(
      static_cast<uint64_t>(o.drop_seed) ^
      Mix64(static_cast<uint64_t>(epoch) ^ Mix64(static_cast<uint64_t>(example) ^ kDropSalt)));
  const IndexShuffle perm(static_cast<uint64_t>(patches), seed);
  for (int64_t k = 0; k < kept; ++k) {
    ids[static_cast<size_t>(k)] = static_cast<int64_t>(perm(static_cast<uint64_t>(k)));
  }
  std::sort(ids.begin(), ids.end());  // raster order, as the model sees the image
  return ids;
}

void CheckPatchesFit(std::span<const int64_t> heights, std::span<const int64_t> widths,
                     const PatchPackOptions& o) {
  ValidatePatchPack(o);
  CheckSizes(heights, widths);
  PlanBuilder scratch(/*packed=*/true);
  for (size_t i = 0; i < heights.size(); ++i) {
    const auto id = static_cast<int64_t>(i);
    const PatchGrid grid = PatchGridOf(heights[i], widths[i], o, id);
    if (o.too_long != TooLong::kSkip) Admit(id, grid, o, scratch);
  }
}

BatchPlan PlanPatchPack(std::span<const int64_t> heights, std::span<const int64_t> widths,
                        PlanOrder ids, const PatchPackOptions& o) {
  ValidatePatchPack(o);
  CheckSizes(heights, widths);
  const std::vector<int64_t> order = PlanIds(static_cast<int64_t>(heights.size()), ids);
  const bool split = o.too_long == TooLong::kSplit;
  PlanBuilder builder(/*packed=*/true);
  builder.set_split(split);
  std::vector<int64_t> patches(heights.size(), 0);  // kept patches per image, by id
  std::vector<int64_t> admitted;
  Pieces pieces;
  for (int64_t id : order) {
    if (id < 0 || id >= static_cast<int64_t>(heights.size())) {
      throw OutOfRangeError(
          StrCat(kName, ": image ", id, " is not an index of the ", heights.size(), " images"));
    }
    const auto i = static_cast<size_t>(id);
    const PatchGrid grid = PatchGridOf(heights[i], widths[i], o, id);
    patches[i] = KeptPatchCount(grid.count(), o.drop_percent);
    if (!Admit(id, grid, o, builder)) continue;
    admitted.push_back(id);
    if (split) AddPieces(id, grid, o, pieces);
  }
  // The packer sees images by id, or under split pieces by their index.
  std::vector<int64_t> piece_ids(pieces.lengths.size());
  std::iota(piece_ids.begin(), piece_ids.end(), 0);
  const std::span<const int64_t> item_lengths = split ? pieces.lengths : patches;
  const std::vector<int64_t>& items = split ? piece_ids : admitted;
  const int64_t segments = o.max_segments_per_row
                               ? *o.max_segments_per_row
                               : DefaultSegments(item_lengths, items, o.row_length);
  const PackedRows rows = PackRowsWith(item_lengths, items, o.row_length, segments, o.algorithm,
                                       o.lookahead, o.open_rows);
  PackOptions batching;  // what AddPackedBatches reads: the batch size and remainder
  batching.rows_per_batch = PatchRowsPerBatch(o);
  // A budget's rows spread evenly over the batches (balance.h).
  if (o.balance_batches && o.token_budget && o.remainder == Remainder::kPad &&
      !PackingFollowsOrder(o.algorithm, o.lookahead, o.open_rows)) {
    batching.rows_per_batch =
        BalancedRows(rows.num_rows(), batching.rows_per_batch, o.rows_multiple);
  }
  batching.remainder = o.remainder;
  batching.rows_multiple = o.rows_multiple;
  AddPackedBatches(
      rows, batching,
      {.rows = batching.rows_per_batch, .length = o.row_length, .segments = segments},
      [&](int64_t r) { AddPatchRow(rows, r, split ? &pieces : nullptr, builder); }, builder);
  return std::move(builder).Finish(patches, static_cast<int64_t>(order.size()));
}

}  // namespace jaxbatch
