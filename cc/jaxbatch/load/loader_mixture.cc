// The Loader's mixture (load/mixture.h): what it sets up once, and how it
// plans an epoch, which for a mixture is one block of the mixed stream.
#include <algorithm>
#include <utility>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/data/output_names.h"
#include "jaxbatch/load/loader.h"

namespace jaxbatch {

void Loader::InitMixture(std::shared_ptr<const Mixture> mixture) {
  const Exhaustion exhaustion = mixture->options.exhaustion;
  if (exhaustion != Exhaustion::kRestart && options_.epochs != 1) {
    throw InvalidArgumentError(
        StrCat("Loader: a mixture with exhaustion='", ExhaustionName(exhaustion),
               "' ends where its sources run out; epochs must be 1, found ",
               options_.epochs == 0 ? "None (endless)" : StrCat(options_.epochs),
               " (exhaustion='restart' repeats the sources)"));
  }
  if (dataset_->has_column(kSourceIndexName)) {
    throw InvalidArgumentError(StrCat("Loader: column '", kSourceIndexName,
                                      "' collides with the output a mixture adds to every "
                                      "batch; rename the column"));
  }
  if (options_.source == "dataset") options_.source = "mixture";
  mixture_spec_ = mixture;
  mixture_ = std::make_unique<MixtureStream>(mixture, MixtureTokens(), requested_, options_.epochs);
  epochs_ = 0;  // The mixture ends the stream: an empty block.
  yielded_.assign(static_cast<size_t>(mixture_->num_sources()), SourceTally{});
  key_.fingerprint = std::nullopt;  // Each source's, in the state's mixture.
  // A planner whose shapes follow the data picks them once: from the
  // mixture's first positions and its longest example.
  std::vector<int64_t> sample;
  for (int64_t e : mixture_->ShapeSample()) {
    if (!excluded_[static_cast<size_t>(e)]) sample.push_back(e);
  }
  int64_t longest = -1;
  for (size_t e = 0; e < lengths_.size(); ++e) {
    if (!excluded_[e] && (longest < 0 || lengths_[e] > lengths_[static_cast<size_t>(longest)])) {
      longest = static_cast<int64_t>(e);
    }
  }
  if (longest >= 0 && std::find(sample.begin(), sample.end(), longest) == sample.end()) {
    sample.push_back(longest);
  }
  mixture_planner_ = FreezeShapes(requested_.planner, lengths_, sample, edge_lengths_, widths_);
  mixture_->set_block_planner(mixture_planner_);
  // A bad record names its source and its index there.
  for (BadRecord& r : bad_records_) {
    const int64_t s = mixture_->SourceOf(r.example);
    r.reason = StrCat("source '", mixture->names[static_cast<size_t>(s)], "', example ",
                      r.example - mixture_->source_begin()[static_cast<size_t>(s)], ": ", r.reason);
  }
}

std::vector<int64_t> Loader::MixtureTokens() const {
  // What unit="tokens" weighs and the stats count: each example's real
  // elements (a grid's cells, a graph's nodes, a Pack's features together,
  // an image's kept patches under PatchPack, which count them already).
  std::vector<int64_t> tokens = real_lengths_.empty() ? lengths_ : real_lengths_;
  if (patch_pack_) return tokens;
  for (size_t i = 0; i < widths_.size(); ++i) tokens[i] = SaturatingMul(tokens[i], widths_[i]);
  return tokens;
}

std::unique_ptr<MixtureStream> Loader::NewMixtureStream() const {
  auto stream =
      std::make_unique<MixtureStream>(mixture_spec_, MixtureTokens(), requested_, options_.epochs);
  stream->set_block_planner(mixture_planner_);
  return stream;
}

EpochSchedule Loader::MakeSchedule(int64_t epoch) const {
  return MakeSchedule(epoch, options_.schedule, mixture_.get(),
                      epoch == earlier_epoch_ ? earlier_deals_ : std::vector<EarlierDeal>{});
}

EpochSchedule Loader::MakeSchedule(int64_t epoch, const ScheduleOptions& schedule,
                                   const MixtureStream* mixture,
                                   const std::vector<EarlierDeal>& earlier_deals) const {
  EpochSchedule planned =
      mixture ? mixture->PlanBlock(epoch, lengths_, excluded_, schedule, edge_lengths_, widths_)
              : MakeEpochSchedule(lengths_, excluded_, schedule, epoch, edge_lengths_, widths_);
  if (earlier_deals.empty()) return planned;
  // An elastic start's epoch: the same global plan, what the earlier deals
  // left of it dealt to this loader's shards.
  const int64_t excluded = planned.excluded;
  planned = DealToShards(std::move(planned.plan), schedule, epoch, earlier_deals);
  planned.excluded = excluded;
  return planned;
}

bool Loader::EndsStream(const EpochSchedule& schedule) const {
  // What earlier deals left of an epoch may be nothing: the next epoch follows.
  if (schedule.remainder) return false;
  // A block that drew nothing: the mixture has ended.
  return !mixture_ || (schedule.plan.stats.examples == 0 && schedule.excluded == 0);
}

std::vector<std::string> Loader::mixture_changes() const {
  return mixture_ ? mixture_->changes() : std::vector<std::string>{};
}

Loader::MixturePass Loader::DrawMixturePass() const {
  if (!mixture_) {
    throw InvalidArgumentError("Loader: one pass of a mixture asked of a loader over one dataset");
  }
  const std::vector<int64_t> tokens = MixtureTokens();
  MixtureStream::Pass drawn = NewMixtureStream()->DrawPass();
  MixturePass pass;
  pass.weights = std::move(drawn.weights);
  const size_t n = drawn.draws.size();
  pass.sources.resize(n);
  pass.examples.resize(n);
  pass.tokens.resize(n);
  const std::vector<int64_t>& begin = mixture_->source_begin();
  for (size_t p = 0; p < n; ++p) {
    const MixtureDraw& d = drawn.draws[p];
    pass.sources[p] = d.source;
    pass.examples[p] = d.example;
    pass.tokens[p] = tokens[static_cast<size_t>(begin[static_cast<size_t>(d.source)] + d.example)];
  }
  return pass;
}

}  // namespace jaxbatch
