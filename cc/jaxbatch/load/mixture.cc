#include "jaxbatch/load/mixture.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <type_traits>
#include <utility>
#include <variant>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/data/fingerprint.h"
#include "jaxbatch/data/output_names.h"
#include "jaxbatch/data/view.h"

namespace jaxbatch {
namespace {

// A weight as a share of `weights`, for the change log ("30.0%").
std::string Percent(int64_t weight, const std::vector<int64_t>& weights) {
  double total = 0;
  for (int64_t w : weights) total += static_cast<double>(w);
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f%%",
                total > 0 ? 100.0 * static_cast<double>(weight) / total : 0.0);
  return text;
}

int64_t IndexOf(const std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  return it == names.end() ? -1 : static_cast<int64_t>(it - names.begin());
}

}  // namespace

void ValidateMixture(const Mixture& mixture) {
  const auto count = mixture.names.size();
  if (count == 0) throw InvalidArgumentError("Dataset.mix: expected a source, found none");
  if (mixture.sources.size() != count) {
    throw InvalidArgumentError(
        StrCat("Dataset.mix: ", count, " names but ", mixture.sources.size(), " sources"));
  }
  for (size_t s = 0; s < count; ++s) {
    if (!mixture.sources[s]) {
      throw InvalidArgumentError(StrCat("Dataset.mix: source '", mixture.names[s], "' is null"));
    }
  }
  const MixtureOptions& o = mixture.options;
  if (o.block_size < 1) {
    throw InvalidArgumentError(
        StrCat("Dataset.mix: block_size must be >= 1, found ", o.block_size));
  }
  if (o.stages.empty() || o.stages.front().start != 0) {
    throw InvalidArgumentError("Dataset.mix: the weights' first stage must start at position 0");
  }
  for (size_t k = 0; k < o.stages.size(); ++k) {
    const MixtureStage& stage = o.stages[k];
    if (stage.start % o.block_size != 0 || stage.start < 0) {
      throw InvalidArgumentError(
          StrCat("Dataset.mix: stage ", k, " starts at position ", stage.start,
                 ", which is not a block boundary (a multiple of block_size=", o.block_size,
                 "); the nearest are ", stage.start / o.block_size * o.block_size, " and ",
                 (stage.start / o.block_size + 1) * o.block_size));
    }
    if (k > 0 && stage.start <= o.stages[k - 1].start) {
      throw InvalidArgumentError(StrCat("Dataset.mix: stage ", k, " starts at ", stage.start,
                                        ", not after stage ", k - 1, "'s ", o.stages[k - 1].start,
                                        "; list stages in order"));
    }
    if (stage.shares.size() != count) {
      throw InvalidArgumentError(StrCat("Dataset.mix: stage ", k, " has ", stage.shares.size(),
                                        " weights for ", count, " sources"));
    }
    WeightsFromShares(stage.shares, mixture.names);
  }
}

std::shared_ptr<const Dataset> ConcatSources(const std::shared_ptr<const Mixture>& mixture) {
  if (!mixture) throw InvalidArgumentError("Loader: expected a mixture, found none");
  ValidateMixture(*mixture);
  std::vector<const Dataset*> parts;
  std::string order;
  for (size_t s = 0; s < mixture->sources.size(); ++s) {
    parts.push_back(mixture->sources[s].get());
    order += StrCat(s ? ", " : "", "dataset ", s, " is '", mixture->names[s], "'");
  }
  try {
    return std::make_shared<const Dataset>(ConcatDatasets(parts));
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(
        StrCat("Dataset.mix: the sources need the same columns (", order, "): ", e.what()));
  }
}

MixtureStream::MixtureStream(std::shared_ptr<const Mixture> mixture, std::vector<int64_t> tokens,
                             const ScheduleOptions& order, int64_t epochs)
    : mixture_(std::move(mixture)), tokens_(std::move(tokens)) {
  ValidateMixture(*mixture_);
  begin_.push_back(0);
  std::vector<int64_t> sizes;
  for (const auto& source : mixture_->sources) {
    sizes.push_back(source->num_examples());
    begin_.push_back(begin_.back() + source->num_examples());
    fingerprints_.push_back(LayoutFingerprint(*source));
  }
  if (static_cast<int64_t>(tokens_.size()) != begin_.back()) {
    throw InvalidArgumentError(StrCat("MixtureStream: ", tokens_.size(), " token counts for ",
                                      begin_.back(), " examples"));
  }
  std::vector<std::span<const int64_t>> spans;
  for (size_t s = 0; s + 1 < begin_.size(); ++s) {
    spans.push_back(std::span<const int64_t>(tokens_).subspan(
        static_cast<size_t>(begin_[s]), static_cast<size_t>(begin_[s + 1] - begin_[s])));
  }
  const MixtureOptions& o = mixture_->options;
  schedule_ = std::make_unique<MixtureSchedule>(
      sizes, spans, o.unit, o.exhaustion,
      SourceOrder{.shuffle = order.shuffle, .block_size = order.block_size, .seed = order.seed},
      mixture_->names);
  if (o.exhaustion == Exhaustion::kRestart && epochs > 0) {
    limit_ = SaturatingMul(epochs, std::max<int64_t>(begin_.back(), 1));
  }
  starts_[0] = schedule_->Start(WeightsOfBlock(0));
}

int64_t MixtureStream::SourceOf(int64_t example) const {
  const auto it = std::upper_bound(begin_.begin() + 1, begin_.end(), example);
  return static_cast<int64_t>(it - (begin_.begin() + 1));
}

std::vector<int64_t> MixtureStream::WeightsOfBlock(int64_t block) const {
  if (block == override_block_) return override_weights_;
  const MixtureOptions& o = mixture_->options;
  const int64_t position = SaturatingMul(block, o.block_size);
  size_t stage = 0;
  while (stage + 1 < o.stages.size() && o.stages[stage + 1].start <= position) ++stage;
  return WeightsFromShares(o.stages[stage].shares, mixture_->names);
}

int64_t MixtureStream::BlockCount(const MixtureCursor& start) const {
  const int64_t block = mixture_->options.block_size;
  if (limit_ == 0) return block;
  return std::clamp<int64_t>(limit_ - start.position, 0, block);
}

MixtureCursor MixtureStream::CursorAt(int64_t block) const {
  auto it = starts_.lower_bound(block);
  if (it != starts_.end() && it->first == block) return it->second;
  if (it == starts_.begin()) {  // Block 0's start is always known: only a negative block.
    throw OutOfRangeError(StrCat("Loader: block ", block, " of the mixture is out of range"));
  }
  --it;
  MixtureCursor cursor = it->second;
  std::vector<MixtureDraw> scratch;
  for (int64_t b = it->first; b < block; ++b) {  // Drawn again, not planned.
    scratch.clear();
    if (!cursor.ended) schedule_->Draw(cursor, BlockCount(cursor), &scratch);
    if (!cursor.ended) schedule_->SetWeights(cursor, WeightsOfBlock(b + 1));
    starts_[b + 1] = cursor;
  }
  return cursor;
}

std::vector<int64_t> MixtureStream::ShapeSample() const {
  MixtureCursor cursor = schedule_->Start(WeightsOfBlock(0));
  std::vector<MixtureDraw> draws;
  int64_t wanted = std::max(kShapeSamplePositions, mixture_->options.block_size);
  if (limit_ > 0) wanted = std::min(wanted, limit_);
  schedule_->Draw(cursor, wanted, &draws);
  std::vector<int64_t> ids;
  ids.reserve(draws.size());
  for (const MixtureDraw& d : draws)
    ids.push_back(begin_[static_cast<size_t>(d.source)] + d.example);
  std::sort(ids.begin(), ids.end());  // a planner takes each example once
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<MixtureDraw> MixtureStream::DrawBlock(int64_t block) const {
  MixtureCursor cursor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cursor = CursorAt(block);
  }
  std::vector<MixtureDraw> draws;
  if (!cursor.ended) schedule_->Draw(cursor, BlockCount(cursor), &draws);
  std::lock_guard<std::mutex> lock(mu_);
  if (!starts_.contains(block + 1)) {
    if (!cursor.ended) schedule_->SetWeights(cursor, WeightsOfBlock(block + 1));
    starts_[block + 1] = cursor;
  }
  return draws;
}

MixtureStream::Pass MixtureStream::DrawPass() const {
  if (mixture_->options.exhaustion == Exhaustion::kRestart && limit_ == 0) {
    throw InvalidArgumentError(
        "MixtureStream: a mixture with exhaustion='restart' and no epoch limit never ends; one "
        "pass needs epochs=1");
  }
  Pass pass;
  for (int64_t block = 0;; ++block) {
    std::vector<MixtureDraw> draws = DrawBlock(block);
    if (draws.empty()) break;
    pass.draws.insert(pass.draws.end(), draws.begin(), draws.end());
    pass.weights = WeightsOfBlock(block);
    Forget(block + 1);
  }
  if (pass.weights.empty()) pass.weights = WeightsOfBlock(0);
  return pass;
}

EpochSchedule MixtureStream::PlanBlock(int64_t block, std::span<const int64_t> lengths,
                                       std::span<const uint8_t> excluded,
                                       const ScheduleOptions& options,
                                       std::span<const int64_t> edges,
                                       std::span<const int64_t> widths) const {
  const std::vector<MixtureDraw> draws = DrawBlock(block);
  // The block's examples by position (a source may repeat one within a
  // block), planned in the order drawn: the plan depends on the lengths
  // drawn alone, whatever the sources' place in the concatenation.
  const size_t n = draws.size();
  std::vector<int64_t> ids(n), local_lengths(n), local_widths, order;
  order.reserve(n);
  int64_t bad = 0;
  for (size_t j = 0; j < n; ++j) {
    ids[j] = begin_[static_cast<size_t>(draws[j].source)] + draws[j].example;
    local_lengths[j] = lengths[static_cast<size_t>(ids[j])];
    if (!excluded.empty() && excluded[static_cast<size_t>(ids[j])]) {
      ++bad;
    } else {
      order.push_back(static_cast<int64_t>(j));
    }
  }
  if (!widths.empty()) {
    local_widths.resize(n);
    for (size_t j = 0; j < n; ++j) local_widths[j] = widths[static_cast<size_t>(ids[j])];
  }
  std::vector<int64_t> local_edges;
  const auto total = static_cast<size_t>(begin_.back());
  if (!edges.empty() && total > 0) {  // a graph's edges, or each further feature's lengths
    const size_t features = edges.size() / total;
    local_edges.resize(features * n);
    for (size_t f = 0; f < features; ++f) {
      for (size_t j = 0; j < n; ++j) {
        local_edges[f * n + j] = edges[f * total + static_cast<size_t>(ids[j])];
      }
    }
  }
  ScheduleOptions o = options;
  if (block_planner_) o.planner = *block_planner_;
  BatchPlan plan = order.empty() ? Plan({}, o.planner)
                                 : Plan(local_lengths, o.planner, order, local_edges, local_widths);
  for (std::vector<int64_t>* v :
       {&plan.example_ids, &plan.dropped_examples, &plan.skipped_examples}) {
    for (int64_t& x : *v) x = ids[static_cast<size_t>(x)];
  }
  EpochSchedule schedule = DealToShards(std::move(plan), o, block);
  schedule.excluded = bad;
  return schedule;
}

void MixtureStream::Forget(int64_t block) const {
  std::lock_guard<std::mutex> lock(mu_);
  // The first is kept: any block from the loader's start can be drawn again
  // from it (TotalSteps, Steps of a past epoch).
  if (starts_.empty()) return;
  auto end = starts_.lower_bound(block);
  if (end == starts_.end()) --end;
  if (end != starts_.begin()) starts_.erase(std::next(starts_.begin()), end);
}

MixtureState MixtureStream::State(int64_t block, const std::vector<SourceTally>& yielded) const {
  std::lock_guard<std::mutex> lock(mu_);
  const MixtureCursor cursor = CursorAt(block);
  const MixtureOptions& o = mixture_->options;
  MixtureState state{.unit = o.unit,
                     .exhaustion = o.exhaustion,
                     .block_size = o.block_size,
                     .position = cursor.position,
                     .ended = cursor.ended,
                     .sources = {}};
  for (size_t s = 0; s < mixture_->names.size(); ++s) {
    state.sources.push_back(
        MixtureSourceState{.name = mixture_->names[s],
                           .fingerprint = fingerprints_[s],
                           .size = begin_[s + 1] - begin_[s],
                           .cursor = cursor.sources[s],
                           .weight = cursor.weights[s],
                           .examples = s < yielded.size() ? yielded[s].examples : 0,
                           .elements = s < yielded.size() ? yielded[s].elements : 0});
  }
  return state;
}

std::vector<SourceTally> MixtureStream::Restore(const MixtureState& state, int64_t block,
                                                int64_t step) {
  const MixtureOptions& o = mixture_->options;
  const auto differs = [](const char* what, const std::string& saved, const std::string& mine) {
    throw InvalidArgumentError(StrCat("Loader: the state's mixture was drawn with ", what, "=",
                                      saved, " but this one has ", what, "=", mine,
                                      "; the stream would differ"));
  };
  if (state.unit != o.unit) differs("unit", MixtureUnitName(state.unit), MixtureUnitName(o.unit));
  if (state.exhaustion != o.exhaustion) {
    differs("exhaustion", ExhaustionName(state.exhaustion), ExhaustionName(o.exhaustion));
  }
  if (state.block_size != o.block_size) {
    differs("block_size", StrCat(state.block_size), StrCat(o.block_size));
  }
  const int64_t start = SaturatingMul(block, o.block_size);
  // Past the stream's end a block starts where the stream ended.
  const bool at_end = state.ended || (limit_ > 0 && state.position == limit_);
  if (state.position > start || (state.position < start && !at_end)) {
    throw InvalidArgumentError(StrCat("Loader: the state's mixture position ", state.position,
                                      " is not where its block ", block, " starts (", start, ")"));
  }
  const std::vector<std::string>& names = mixture_->names;
  std::vector<std::string> saved_names;
  std::vector<std::string> removed;
  for (const MixtureSourceState& source : state.sources) {
    saved_names.push_back(source.name);
    const int64_t s = IndexOf(names, source.name);
    if (s < 0) {
      removed.push_back(source.name);
      continue;
    }
    const int64_t size = begin_[static_cast<size_t>(s) + 1] - begin_[static_cast<size_t>(s)];
    if (source.fingerprint != fingerprints_[static_cast<size_t>(s)] || source.size != size) {
      throw InvalidArgumentError(StrCat(
          "Loader: the state's source '", source.name, "' (", source.size,
          " examples) is other data than this mixture's source of that name (", size,
          " examples): its columns or lengths differ; a source keeps its name only while its "
          "data stays the same"));
    }
  }
  // Where the block starts, every source as the state left it (a new one at
  // draw 0, weight 0), and the weights the block was drawn with.
  MixtureCursor cursor;
  cursor.position = state.position;
  cursor.ended = state.ended;
  cursor.sources.resize(names.size());
  cursor.weights.assign(names.size(), 0);
  std::vector<SourceTally> yielded(names.size());
  for (const MixtureSourceState& source : state.sources) {
    const int64_t s = IndexOf(names, source.name);
    if (s < 0) continue;
    cursor.sources[static_cast<size_t>(s)] = source.cursor;
    cursor.weights[static_cast<size_t>(s)] = source.weight;
    yielded[static_cast<size_t>(s)] = {source.examples, source.elements};
  }
  const std::vector<int64_t> weights = WeightsOfBlock(block);
  const bool changed = !removed.empty() || cursor.weights != weights;
  std::vector<int64_t> saved_weights;
  for (const MixtureSourceState& source : state.sources) saved_weights.push_back(source.weight);
  changes_.clear();
  if (changed && step > 0 && !removed.empty()) {
    throw InvalidArgumentError(StrCat(
        "Loader: the state was saved at step ", step, " of block ", block,
        " of a mixture with source '", removed.front(), "', which this mixture lacks, and the ",
        "rest of that block draws from it; pass '", removed.front(),
        "' again with weight 0 (it is then left out from the next block on), or resume from a ",
        "state saved where a block starts (step 0)"));
  }
  int64_t from = block;
  if (changed && step > 0) {
    // The block it was saved in is drawn as it was; the new weights follow.
    override_block_ = block;
    override_weights_ = cursor.weights;
    from = block + 1;
  }
  if (changed) {
    const std::string where = StrCat("from block ", from, " (position ", from * o.block_size, ")");
    for (size_t t = 0; t < state.sources.size(); ++t) {
      const MixtureSourceState& source = state.sources[t];
      const int64_t s = IndexOf(names, source.name);
      if (s < 0) {
        changes_.push_back(StrCat("mixture: source '", source.name, "' removed ", where,
                                  "; it had yielded ", source.examples, " examples"));
        continue;
      }
      const std::string before = Percent(source.weight, saved_weights);
      const std::string after = Percent(weights[static_cast<size_t>(s)], weights);
      if (before != after) {
        changes_.push_back(StrCat("mixture: source '", source.name, "' weight ", before, " -> ",
                                  after, " ", where));
      }
    }
    for (size_t s = 0; s < names.size(); ++s) {
      if (IndexOf(saved_names, names[s]) >= 0) continue;
      changes_.push_back(StrCat("mixture: source '", names[s], "' added at ",
                                Percent(weights[s], weights), " ", where));
    }
  }
  if (!cursor.ended) schedule_->SetWeights(cursor, WeightsOfBlock(block));
  std::lock_guard<std::mutex> lock(mu_);
  // The blocks before it, this mixture's from its start (len(loader) counts them).
  starts_.clear();
  if (block > 0) starts_[0] = schedule_->Start(WeightsOfBlock(0));
  starts_[block] = cursor;
  return yielded;
}

void MixtureStream::TagBatch(std::vector<Array>& arrays, const Allocator& allocator) const {
  for (size_t k = 0; k < arrays.size(); ++k) {
    if (arrays[k].name != kExampleIndexName && arrays[k].name != kGraphIndexName) continue;
    Array source =
        AllocateArray(std::string(kSourceIndexName), DType::kInt32, arrays[k].shape, allocator);
    auto* ids = reinterpret_cast<int64_t*>(arrays[k].data);
    auto* sources = reinterpret_cast<int32_t*>(source.data);
    const int64_t n = arrays[k].num_bytes() / static_cast<int64_t>(sizeof(int64_t));
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0) {
        sources[i] = -1;
        continue;
      }
      const int64_t s = SourceOf(ids[i]);
      sources[i] = static_cast<int32_t>(s);
      ids[i] -= begin_[static_cast<size_t>(s)];
    }
    arrays.push_back(std::move(source));
    return;
  }
}

std::vector<SourceTally> MixtureStream::Tally(const BatchView& view,
                                              std::span<const int64_t> lengths,
                                              std::span<const int64_t> widths, bool graph) const {
  std::vector<SourceTally> tally(static_cast<size_t>(num_sources()));
  for (int64_t r = 0; r < view.stored_rows(); ++r) {
    int64_t used = 0;
    for (int64_t q = view.row_begin[r]; q < view.row_begin[r + 1]; ++q) {
      const int64_t e = view.examples[static_cast<size_t>(q)];
      SourceTally& t = tally[static_cast<size_t>(SourceOf(e))];
      int64_t add = 0;
      if (view.shape.width > 0) {
        add = SaturatingMul(std::min(lengths[static_cast<size_t>(e)], view.shape.length),
                            std::min(widths[static_cast<size_t>(e)], view.shape.width));
      } else {
        const int64_t length = SegmentLength(view, lengths, q);
        add = graph ? length : std::min(length, view.shape.length - used);
        used = SaturatingAdd(used, add);
      }
      t.elements = SaturatingAdd(t.elements, add);
      if (view.pieces.empty() || view.piece(q) == 0) t.examples += 1;
    }
  }
  return tally;
}

PlannerOptions FreezeShapes(const PlannerOptions& given, std::span<const int64_t> lengths,
                            std::span<const int64_t> sample, std::span<const int64_t> edges,
                            std::span<const int64_t> widths) {
  // A token budget's rows stay the budget's: balanced over one block's rows
  // (balance.h) they would change from block to block, a new shape each
  // time; and AutoBuckets' rows come from the sample's plan, whose counts
  // are not a block's.
  PlannerOptions planner = given;
  std::visit(
      [](auto& o) {
        if constexpr (requires { o.balance_batches; }) o.balance_batches = false;
      },
      planner);
  return std::visit(
      [&](const auto& o) -> PlannerOptions {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GraphBucketsOptions>) {
          // The shapes the sample's graphs choose, given: every block's
          // batches take the smallest of them that holds each.
          if (!o.shapes.empty() || sample.empty()) return o;
          const std::vector<int64_t> ids(sample.begin(), sample.end());
          const std::vector<BatchShape> shapes = GraphBucketShapes(lengths, edges, ids, o);
          GraphBucketsOptions frozen = o;
          for (size_t k = 1; k < shapes.size(); ++k) {  // shapes[0] is the budget
            frozen.shapes.insert(frozen.shapes.end(),
                                 {shapes[k].length, shapes[k].edges, shapes[k].rows});
          }
          return frozen;
        } else if constexpr (std::is_same_v<T, AspectBucketsOptions>) {
          // The buckets every example chooses (those the Loader checked the
          // data is at, CheckAspectExamplesFit), as their ratios: each
          // ratio's nearest resolution is its own bucket.
          if (!o.ratios.empty() || widths.empty()) return o;
          std::vector<int64_t> all(lengths.size());
          std::iota(all.begin(), all.end(), 0);
          AspectBucketsOptions frozen = o;
          frozen.max_shapes = std::nullopt;
          for (const Resolution& r : ChooseAspectBuckets(lengths, widths, all, o)) {
            frozen.ratios.insert(frozen.ratios.end(), {r.width, r.height});
          }
          return frozen;
        } else if constexpr (std::is_same_v<T, PatchPackOptions>) {
          // The images a row holds, as the sample's plan picks them (a block
          // of smaller images packs into more rows).
          if (o.max_segments_per_row || sample.empty()) return o;
          const BatchPlan plan = Plan(lengths, o, sample, edges, widths);
          PatchPackOptions frozen = o;
          int64_t segments = 1;
          for (const BatchShape& shape : plan.shapes) segments = std::max(segments, shape.segments);
          frozen.max_segments_per_row = segments;
          return frozen;
        } else if constexpr (std::is_same_v<T, AutoBucketsOptions>) {
          if (!widths.empty() || sample.empty()) return o;
          // The buckets the sample chooses, as fixed buckets: their lengths
          // and rows (a kept remainder's smaller batches aside).
          const BatchPlan plan = Plan(lengths, o, sample, edges, widths);
          std::map<int64_t, int64_t> rows;
          for (const BatchShape& shape : plan.shapes) {
            rows[shape.length] = std::max(rows[shape.length], shape.rows);
          }
          FixedBucketsOptions fixed{.remainder = o.remainder,
                                    .too_long = TooLong::kError,
                                    .rows_multiple = o.rows_multiple};
          for (const auto& [length, count] : rows) {
            fixed.boundaries.push_back(length);
            fixed.batch_sizes.push_back(count);
          }
          return fixed;
        } else if constexpr (std::is_same_v<T, PackOptions>) {
          if (o.max_segments_per_row && !o.max_shapes) return o;
          // The segments (and row lengths) a plan of the sample picks.
          if (sample.empty()) return o;
          const BatchPlan plan = Plan(lengths, o, sample, edges, widths);
          PackOptions frozen = o;
          int64_t segments = 1;
          std::vector<int64_t> row_lengths;
          for (const BatchShape& shape : plan.shapes) {
            segments = std::max(segments, shape.segments);
            row_lengths.push_back(shape.length);
          }
          if (!o.max_segments_per_row) frozen.max_segments_per_row = segments;
          if (o.max_shapes) {
            row_lengths.push_back(o.row_length);
            std::sort(row_lengths.begin(), row_lengths.end());
            row_lengths.erase(std::unique(row_lengths.begin(), row_lengths.end()),
                              row_lengths.end());
            frozen.max_shapes = std::nullopt;
            frozen.row_length_list = row_lengths;
          }
          return frozen;
        } else {
          return o;
        }
      },
      planner);
}

}  // namespace jaxbatch
