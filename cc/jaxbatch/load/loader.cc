#include "jaxbatch/load/loader.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <utility>

#include "jaxbatch/base/available_memory.h"
#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/base/file_stamp.h"
#include "jaxbatch/base/mapped_read.h"
#include "jaxbatch/base/threads.h"
#include "jaxbatch/collate/patch_batch.h"
#include "jaxbatch/data/fingerprint.h"
#include "jaxbatch/data/graph.h"
#include "jaxbatch/load/prefetch.h"
#include "jaxbatch/plan/pack_features.h"
#include "jaxbatch/plan/planner_key.h"

namespace jaxbatch {
namespace {

// The schedule a state of `version` was planned with: versions 1 and 2
// left AutoBuckets' remainder rows empty, 1 to 3 left a budget's rows unbalanced.
ScheduleOptions PlannedAsVersion(ScheduleOptions schedule, int64_t version) {
  if (auto* o = std::get_if<AutoBucketsOptions>(&schedule.planner); o && version < 3) {
    o->fill_remainders = false;
  }
  if (version < 4) {  // 1 to 3 kept a budget's rows a batch unbalanced.
    std::visit(
        [](auto& o) {
          if constexpr (requires { o.balance_batches; }) o.balance_batches = false;
        },
        schedule.planner);
  }
  return schedule;
}

// A fingerprint as states print it: 16 hex digits, quoted.
std::string Hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return StrCat("'", text, "'");
}

std::string JsonEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += StrCat("\\u00", "0123456789abcdef"[(c >> 4) & 0xf], "0123456789abcdef"[c & 0xf]);
        } else {
          out += c;
        }
    }
  }
  return out;
}

// A mapped file's stamp; IoError naming it if it is gone or cannot be stat'ed.
FileStamp StampMappedFile(const std::string& path, const std::string& when) {
  std::optional<FileStamp> stamp;
  std::string error = "no such file";
  try {
    stamp = StampFile(path);
  } catch (const IoError& e) {
    error = e.what();
  }
  if (!stamp) {
    throw IoError(StrCat("Loader: cannot stat mapped file ", path, " ", when, ": ", error,
                         "; files must not be changed while a Loader reads them"));
  }
  return *stamp;
}

}  // namespace

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options,
               std::optional<LoaderState> start)
    : Loader(std::move(dataset), nullptr, nullptr, std::move(options), start) {}

Loader::Loader(std::shared_ptr<const ChunkedSource> source, LoaderOptions options,
               std::optional<LoaderState> start)
    : Loader(source ? source->prototype : nullptr, source, nullptr, std::move(options), start) {}

Loader::Loader(std::shared_ptr<const Mixture> mixture, LoaderOptions options,
               std::optional<LoaderState> start)
    : Loader(ConcatSources(mixture), nullptr, mixture, std::move(options), start) {}

Loader::Loader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const ChunkedSource> source,
               std::shared_ptr<const Mixture> mixture, LoaderOptions options,
               std::optional<LoaderState> start)
    : dataset_(std::move(dataset)), chunked_(std::move(source)), options_(std::move(options)) {
  epochs_ = options_.epochs;
  if (!dataset_) {
    throw InvalidArgumentError("Loader: expected a dataset or a chunked source, found none");
  }
  if (chunked_) {
    if (!options_.schema.columns.empty()) {
      throw InvalidArgumentError(
          "Loader: a chunked source's schema is applied when it is built "
          "(ChunkedSourceBuilder); expected an empty LoaderOptions::schema");
    }
    // Graphs have no length column: InitGraphs refuses one as it does for a dataset.
    if (!options_.length_column.empty() && options_.length_column != chunked_->length_column &&
        !chunked_->graph) {
      throw InvalidArgumentError(StrCat("Loader: length_column '", options_.length_column,
                                        "' differs from the chunked source's '",
                                        chunked_->length_column, "'"));
    }
    if (!chunked_->graph) options_.length_column = chunked_->length_column;
    if (options_.host_memory_limit <= 0) {
      throw InvalidArgumentError(
          StrCat("Loader: streaming ", options_.source,
                 " chunk by chunk needs host_memory_limit > 0 to size its cache, found ",
                 options_.host_memory_limit));
    }
  }
  ValidatePlannerOptions(options_.schedule.planner);
  ValidateLoaderOptions(options_);
  CheckPadValues(*dataset_, options_.collate, "Loader");
  // Stamped before the first read: a change from here on is seen.
  for (const std::string& path : options_.mapped_files) {
    mapped_files_.push_back(MappedFile{path, StampMappedFile(path, "when the loader starts")});
  }
  MappedReadScope reads(&mapped_faults_);  // Lengths and bad records read the data.
  if (IsGraphPlanner(options_.schedule.planner)) {
    InitGraphs();
  } else if (chunked_ && chunked_->graph) {
    throw InvalidArgumentError(StrCat("Loader: a chunked source built for graphs is planned by ",
                                      "GraphBudget or GraphBuckets, found ",
                                      PlannerName(options_.schedule.planner)));
  } else {
    InitLengths();
  }
  num_examples_ = static_cast<int64_t>(lengths_.size());
  const ScheduleOptions& schedule = options_.schedule;
  key_ = StreamKey{.num_examples = num_examples_,
                   .fingerprint = chunked_ ? LayoutFingerprint(*dataset_,
                                                               [&](const RaggedColumn& c) {
                                                                 return chunked_->lengths(c.name());
                                                               })
                                           : LayoutFingerprint(*dataset_),
                   .planner = PlannerKey(schedule.planner),
                   .shuffle = schedule.shuffle,
                   .block_size = schedule.block_size,
                   .shard_index = schedule.shard_index,
                   .shard_count = schedule.shard_count};
  const std::vector<BadRecord> bad =
      chunked_ ? chunked_->bad_records : FindBadRecords(*dataset_, options_.schema);
  bad_records_.insert(bad_records_.end(), bad.begin(), bad.end());
  mapped_faults_.ThrowIfFaulted("Loader");
  // A graph may break the schema and the graph rules: one record, the first reason.
  std::stable_sort(bad_records_.begin(), bad_records_.end(),
                   [](const BadRecord& a, const BadRecord& b) { return a.example < b.example; });
  bad_records_.erase(
      std::unique(bad_records_.begin(), bad_records_.end(),
                  [](const BadRecord& a, const BadRecord& b) { return a.example == b.example; }),
      bad_records_.end());
  excluded_.assign(lengths_.size(), 0);
  for (const BadRecord& r : bad_records_) {
    excluded_[static_cast<size_t>(r.example)] = 1;
    // A bad graph's counts may be anything: it is never planned.
    lengths_[static_cast<size_t>(r.example)] = 0;
    if (!widths_.empty()) widths_[static_cast<size_t>(r.example)] = 0;
    // An edge count, or each further feature's length.
    for (size_t k = static_cast<size_t>(r.example); k < edge_lengths_.size();
         k += lengths_.size()) {
      edge_lengths_[k] = 0;
    }
  }
  // A graph over the budget or a sequence too long for the planner is named
  // now, not when a worker plans the first epoch.
  CheckExamplesFit(lengths_, options_.schedule.planner, edge_lengths_, widths_);
  if (const auto* pack = std::get_if<PackOptions>(&options_.schedule.planner);
      pack && !pack->row_lengths.empty()) {
    real_lengths_ = PackFeatureTotals(lengths_, edge_lengths_, *pack);
  }
  if (patch_pack_) real_lengths_ = KeptPatchCounts(lengths_, widths_, *patch_pack_);
  requested_ = options_.schedule;
  if (mixture) InitMixture(std::move(mixture));

  state_.seed = options_.schedule.seed;
  state_.key = key_;
  if (start) {
    std::shared_ptr<const EpochSchedule> planned = CheckStart(*start, mixture_.get(), &yielded_);
    if (!start->earlier_deals.empty()) {  // An elastic start: its epoch is dealt anew.
      earlier_deals_ = start->earlier_deals;
      earlier_epoch_ = start->epoch;
    }
    if (start->key && start->key->version < kLoaderStateVersion) {
      PlanAsVersion(start->key->version);
    }
    if (planned) schedules_[start->epoch] = std::move(planned);  // The workers reuse it.
    state_ = *start;
    state_.key = key_;
    state_.mixture.reset();  // state() makes it anew
    // An elastic start (earlier deals, counters from zero) enters its epoch
    // again: it counts that epoch's drops, its own deal's included.
    entered_epoch_ = state_.step > 0 ? state_.epoch : state_.epoch - 1;
  }
  claim_epoch_ = state_.epoch;
  claim_step_ = state_.step;
  const bool automatic = options_.num_threads == 0;
  int64_t threads = options_.num_threads;
  if (automatic) {
    threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxDefaultThreads);
  }
  if (options_.host_memory_limit > 0) {
    CheckMemoryLimit();
  } else {
    CheckBatchFitsMachine();
  }
  if (chunked_) {
    threads = SizeChunkCache(threads, automatic);
  } else {
    arena_ = std::make_unique<BufferArena>(options_.host_memory_limit);
  }
  options_.collate.allocator = [this](size_t bytes, uint8_t** data) {
    return arena_->Acquire(bytes, data);
  };
  // A thread that cannot start throws here, the others stopped and joined:
  // the destructor does not run for a constructor that throws.
  workers_ = StartThreads(
      threads, [this](int64_t) { WorkerLoop(); },
      [this] {
        {
          std::lock_guard<std::mutex> lock(mu_);
          stop_ = true;
        }
        work_cv_.notify_all();
      },
      "Loader: num_threads");
}

Loader::~Loader() { Close(); }

const char* ErrorPolicyName(ErrorPolicy policy) {
  switch (policy) {
    case ErrorPolicy::kRaise:
      return "raise";
    case ErrorPolicy::kSkip:
      return "skip";
    case ErrorPolicy::kQuarantine:
      return "quarantine";
  }
  return "?";
}

ErrorPolicy ParseErrorPolicy(std::string_view name) {
  for (const ErrorPolicy p : {ErrorPolicy::kRaise, ErrorPolicy::kSkip, ErrorPolicy::kQuarantine}) {
    if (name == ErrorPolicyName(p)) return p;
  }
  throw InvalidArgumentError(
      StrCat("Loader: on_error must be 'raise', 'skip' or 'quarantine', found '", name, "'"));
}

void ValidateLoaderOptions(const LoaderOptions& options, std::string_view who) {
  ValidateScheduleOptions(options.schedule, who);
  if (options.prefetch < 1) {
    throw InvalidArgumentError(StrCat(who, ": prefetch must be >= 1, found ", options.prefetch));
  }
  if (options.epochs < 0) {
    throw InvalidArgumentError(
        StrCat(who, ": epochs must be >= 1 (or 0 for forever), found ", options.epochs));
  }
  if (options.num_threads < 0) {
    throw InvalidArgumentError(StrCat(
        who, ": num_threads must be >= 1 (or 0 for automatic), found ", options.num_threads));
  }
  CheckThreadCount(options.num_threads, StrCat(who, ": num_threads"));
  if (options.host_memory_limit < 0) {
    throw InvalidArgumentError(
        StrCat(who, ": host_memory_limit must be >= 0, found ", options.host_memory_limit));
  }
  if (options.max_errors < -1) {
    throw InvalidArgumentError(
        StrCat(who, ": max_errors must be >= 0 (or -1 for no limit), found ", options.max_errors));
  }
}

void Loader::CheckStreamKey(const StreamKey& key) const {
  if (key.version < 1 || key.version > kLoaderStateVersion) {
    throw InvalidArgumentError(StrCat("Loader: expected a state of version ", kLoaderStateVersion,
                                      ", found ", key.version));
  }
  if (key.version == 1 && key.shuffle == ShuffleMode::kBlock) {
    throw InvalidArgumentError(
        "Loader: the state (version 1) was saved by a jaxbatch whose block shuffle shuffled the "
        "batches' order too; this one keeps the blocks' order, so the stream would differ: "
        "restart the epoch (set the state's step to 0) or use that version");
  }
  if (key.num_examples != key_.num_examples && !mixture_) {
    throw InvalidArgumentError(StrCat("Loader: the state was saved for ", key.num_examples,
                                      " examples but this source has ", key_.num_examples));
  }
  // A mixture's state holds each source's fingerprint (in its mixture), not one.
  if (mixture_ && key.fingerprint) {
    throw InvalidArgumentError(StrCat("Loader: the state's key holds a fingerprint (",
                                      Hex(*key.fingerprint),
                                      "), but a mixture's state holds each source's in its "
                                      "mixture; expected a state from Loader::state()"));
  }
  if (!key.fingerprint && key.version >= kCompleteStateVersion && !mixture_) {
    throw InvalidArgumentError(StrCat("Loader: the state (version ", key.version,
                                      ") has no fingerprint, which every state of its version "
                                      "holds; expected a state from Loader::state()"));
  }
  if (key.fingerprint && key.fingerprint != key_.fingerprint) {
    throw InvalidArgumentError(
        StrCat("Loader: the state was saved for other data (fingerprint ", Hex(*key.fingerprint),
               ") than this source (", Hex(*key_.fingerprint),
               "): the same number of examples but other columns or lengths"));
  }
  auto differs = [](const char* what, const std::string& saved, const std::string& mine) {
    throw InvalidArgumentError(StrCat("Loader: the state was saved with ", what, "=", saved,
                                      " but this loader has ", what, "=", mine,
                                      "; the stream would differ"));
  };
  if (key.shuffle != key_.shuffle) {
    differs("shuffle", StrCat("'", ShuffleModeName(key.shuffle), "'"),
            StrCat("'", ShuffleModeName(key_.shuffle), "'"));
  }
  if (key.block_size != key_.block_size) {
    differs("block_size", StrCat(key.block_size), StrCat(key_.block_size));
  }
  if (key.shard_index != key_.shard_index || key.shard_count != key_.shard_count) {
    differs("shard", StrCat("[", key.shard_index, ", ", key.shard_count, "]"),
            StrCat("[", key_.shard_index, ", ", key_.shard_count, "]"));
  }
  PlannerOptions saved;
  try {
    saved = ParsePlannerKey(key.planner);
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's planner cannot be read (", e.what(), ")"));
  }
  if (!(saved == requested_.planner)) {
    throw InvalidArgumentError(StrCat("Loader: the state was saved with planner ", key.planner,
                                      " but this loader has ", key_.planner));
  }
}

void Loader::PlanAsVersion(int64_t version) {
  // The state's stream is the one that version planned; it stays that
  // version, so a state saved from here restores the same way again.
  key_.version = version;
  options_.schedule = PlannedAsVersion(requested_, version);
}

void Loader::CheckState(const LoaderState& state) const {
  // A mixture's state is checked by restoring it into a stream of its own.
  std::unique_ptr<MixtureStream> scratch = mixture_ ? NewMixtureStream() : nullptr;
  std::vector<SourceTally> yielded;
  CheckStart(state, scratch.get(), &yielded);
}

std::shared_ptr<const EpochSchedule> Loader::CheckStart(const LoaderState& start,
                                                        MixtureStream* mixture,
                                                        std::vector<SourceTally>* yielded) const {
  if (mixture_ && !start.mixture) {
    throw InvalidArgumentError(
        "Loader: the state was saved by a loader over one dataset; this one reads a mixture");
  }
  if (!mixture_ && start.mixture) {
    throw InvalidArgumentError(
        "Loader: the state was saved by a loader over a mixture; this one reads one dataset");
  }
  if (start.seed != requested_.seed) {
    throw InvalidArgumentError(StrCat("Loader: the state was saved with seed ", start.seed,
                                      " but this loader has seed ", requested_.seed));
  }
  if (start.key) CheckStreamKey(*start.key);
  const std::pair<const char*, int64_t> counters[] = {{"epoch", start.epoch},
                                                      {"step", start.step},
                                                      {"batches", start.batches},
                                                      {"examples", start.examples},
                                                      {"skipped", start.skipped},
                                                      {"quarantined", start.quarantined},
                                                      {"dropped", start.dropped},
                                                      {"padding_batches", start.padding_batches},
                                                      {"truncated", start.truncated},
                                                      {"real_elements", start.real_elements},
                                                      {"padded_elements", start.padded_elements},
                                                      {"real_edges", start.real_edges},
                                                      {"padded_edges", start.padded_edges}};
  for (const auto& [name, value] : counters) {
    if (value < 0) {
      throw InvalidArgumentError(
          StrCat("Loader: the state's ", name, " must be >= 0, found ", value));
    }
  }
  // Counts reach (epoch + 1) x num_examples: beyond int64 they would overflow.
  const int64_t max_epoch =
      std::numeric_limits<int64_t>::max() / std::max<int64_t>(num_examples_, 1) - 1;
  const int64_t last_epoch = epochs_ > 0 ? epochs_ : max_epoch;
  if (start.epoch > last_epoch || (start.epoch == last_epoch && start.step > 0)) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's position (epoch ", start.epoch, ", step ", start.step,
               ") is past the end of the stream; expected epoch < ", last_epoch,
               epochs_ > 0 ? StrCat(" (epochs=", epochs_, ")") : std::string(), " or epoch ",
               last_epoch, " with step 0"));
  }
  // Steps into the epoch (a mixture's restore asks whether its block was begun).
  int64_t into = start.step;
  for (const EarlierDeal& deal : start.earlier_deals) into = SaturatingAdd(into, deal.steps);
  if (mixture_) *yielded = mixture->Restore(*start.mixture, start.epoch, into);
  if (into == 0) return nullptr;
  const int64_t version = start.key ? start.key->version : kLoaderStateVersion;
  auto schedule = std::make_shared<const EpochSchedule>(MakeSchedule(
      start.epoch, PlannedAsVersion(requested_, version), mixture, start.earlier_deals));
  const auto steps = static_cast<int64_t>(schedule->steps.size());
  if (start.step >= steps && (start.step > 0 || start.earlier_deals.empty())) {
    throw InvalidArgumentError(StrCat("Loader: the state's step ", start.step,
                                      " is past the end of epoch ", start.epoch, ", which has ",
                                      steps, " steps (0 to ", steps - 1,
                                      "); the state is not from this data and planner"));
  }
  return schedule;
}

void Loader::MeasureLargestBatch() {
  std::shared_ptr<const EpochSchedule> schedule;
  if (const auto it = schedules_.find(claim_epoch_); it != schedules_.end()) {
    schedule = it->second;  // planned by the start state's check
  } else {
    schedule = std::make_shared<const EpochSchedule>(MakeSchedule(claim_epoch_));
  }
  int64_t largest = 0;
  for (const BatchShape& shape : schedule->plan.shapes) {
    int64_t bytes =
        patch_pack_
            ? PatchBatchBytes(*dataset_, layout_.length_column, shape, *patch_pack_, layout_.split)
            : CollatedBytes(*dataset_, shape, layout_, options_.collate.padded_segments);
    // A mixture's source_index: an int32 beside each example_index.
    if (mixture_) {
      bytes = SaturatingAdd(
          bytes, SaturatingMul(SaturatingMul(shape.rows, std::max<int64_t>(shape.segments, 1)), 4));
    }
    if (bytes > largest) {
      largest = bytes;
      largest_shape_ = shape;
    }
  }
  largest_batch_bytes_ = largest;
  schedules_[claim_epoch_] = std::move(schedule);  // Planned already: the workers reuse it.
}

void Loader::CheckMemoryLimit() {
  // Workers fill prefetch batches ahead while the consumer holds one (and a
  // Python loop the one before): a limit below that would wait forever.
  MeasureLargestBatch();
  const int64_t largest = largest_batch_bytes_;
  const int64_t needed = SaturatingMul(SaturatingAdd(options_.prefetch, 2), largest);
  if (options_.host_memory_limit < needed) {
    throw InvalidArgumentError(StrCat(
        "Loader: host_memory_limit ", options_.host_memory_limit,
        " bytes holds fewer than prefetch + 2 = ", options_.prefetch + 2, " batches of up to ",
        largest, " bytes; raise it to at least ", needed, " or lower prefetch"));
  }
}

void Loader::CheckBatchFitsMachine() {
  const std::optional<int64_t> available = AvailableMemoryBytes();
  if (!available) return;  // Not known here: nothing to check against.
  MeasureLargestBatch();
  if (largest_batch_bytes_ <= *available) return;
  const BatchShape& s = largest_shape_;
  throw InvalidArgumentError(
      StrCat("Loader: one batch of ", PlannerName(options_.schedule.planner), "'s largest shape (",
             s.rows, s.rows == 1 ? " row x " : " rows x ", s.length,
             s.width > 0 ? StrCat(" x ", s.width) : std::string(),
             s.segments > 0 ? StrCat(", ", s.segments, " segments") : std::string(), ") takes ",
             largest_batch_bytes_, " bytes, more than the ", *available,
             " bytes this machine has available, so it cannot be made (the process would be killed "
             "for memory); plan smaller batches (batch_size, rows_per_batch, row_length or "
             "token_budget), or set host_memory_limit to be told what fits"));
}

int64_t Loader::SizeChunkCache(int64_t threads, bool automatic) {
  const int64_t batches = SaturatingMul(SaturatingAdd(options_.prefetch, 2), largest_batch_bytes_);
  int64_t largest_chunk = 0;
  for (const int64_t bytes : chunked_->chunk_bytes) largest_chunk = std::max(largest_chunk, bytes);
  if (automatic && largest_batch_bytes_ > 0) {
    // Threads the user left to the loader: as many as leave the cache room
    // for its chunks (one at least), so a limit that streams on a machine of
    // two cores streams on one of sixteen, with fewer gathers at a time.
    const int64_t spare =
        options_.host_memory_limit - std::min(SaturatingAdd(SaturatingAdd(batches, largest_chunk),
                                                            std::max<int64_t>(largest_chunk, 1)),
                                              options_.host_memory_limit);
    threads = std::clamp<int64_t>(spare / largest_batch_bytes_, 1, threads);
  }
  const int64_t gathers = SaturatingMul(threads, largest_batch_bytes_);
  const int64_t reserved = SaturatingAdd(SaturatingAdd(batches, gathers), largest_chunk);
  const int64_t cache = options_.host_memory_limit - std::min(reserved, options_.host_memory_limit);
  if (cache < std::max<int64_t>(largest_chunk, 1)) {
    throw InvalidArgumentError(StrCat(
        "Loader: host_memory_limit ", options_.host_memory_limit, " bytes cannot stream ",
        options_.source, ": it must hold prefetch + 2 = ", options_.prefetch + 2,
        " batch buffers and num_threads = ", threads, " gathers of up to ", largest_batch_bytes_,
        " bytes each (", SaturatingAdd(batches, gathers), " bytes), plus twice the largest chunk (",
        largest_chunk, " bytes decoded: one being read, one cached); raise it to at least ",
        SaturatingAdd(reserved, std::max<int64_t>(largest_chunk, 1)),
        ", or lower prefetch or num_threads, or write smaller row groups"));
  }
  arena_limit_ = batches;
  arena_ = std::make_unique<BufferArena>(batches);
  cache_ = std::make_unique<ChunkCache>(chunked_->chunk_bytes, cache);
  return threads;
}

int64_t Loader::NextChunkRequest(std::chrono::milliseconds timeout) {
  if (!cache_) throw InvalidArgumentError("Loader: NextChunkRequest: this loader reads a Dataset");
  return cache_->NextRequest(timeout);
}

void Loader::ProvideChunk(int64_t chunk, const Dataset& decoded) {
  if (!cache_) throw InvalidArgumentError("Loader: ProvideChunk: this loader reads a Dataset");
  try {
    cache_->Provide(chunk, CheckedChunkCopy(*chunked_, chunk, decoded, options_.source));
  } catch (const IoError& e) {  // The chunk differs from what the source recorded.
    cache_->Fail(chunk, e.what());
    throw;
  }
}

void Loader::FailChunk(int64_t chunk, const std::string& message) {
  if (!cache_) throw InvalidArgumentError("Loader: FailChunk: this loader reads a Dataset");
  if (chunk < 0) {
    cache_->Fail(message);
  } else {
    cache_->Fail(chunk, message);
  }
}

void Loader::CheckMappedFiles() const {
  for (const MappedFile& file : mapped_files_) {
    const std::string change =
        DescribeChange(file.stamp, StampMappedFile(file.path, "while the loader reads it"));
    if (!change.empty()) {
      throw IoError(StrCat("Loader: ", file.path, " changed while the loader reads it: ", change,
                           "; files must not be changed while a Loader reads them: write new "
                           "data to a new path or close the Loader first"));
    }
  }
}

void Loader::CheckMappedReads() const {
  CheckMappedFiles();
  mapped_faults_.ThrowIfFaulted("Loader");
}

void Loader::Close() {
  std::lock_guard<std::mutex> closing(close_mu_);  // One closer joins; others wait for it.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && workers_.empty()) return;
    stop_ = true;
  }
  work_cv_.notify_all();
  result_cv_.notify_all();
  schedule_cv_.notify_all();
  if (cache_) cache_->Close();
  arena_->Close();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  workers_.clear();
  results_.clear();
  schedules_.clear();
}

std::shared_ptr<const EpochSchedule> Loader::ScheduleFor(int64_t epoch,
                                                         std::unique_lock<std::mutex>& lock) const {
  while (true) {
    auto it = schedules_.find(epoch);
    if (it != schedules_.end()) return it->second;
    if (stop_) return nullptr;
    if (!building_.contains(epoch)) break;
    schedule_cv_.wait(lock);
  }
  building_.insert(epoch);
  lock.unlock();
  std::shared_ptr<const EpochSchedule> schedule;
  std::exception_ptr error;
  try {
    schedule = std::make_shared<const EpochSchedule>(MakeSchedule(epoch));
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  building_.erase(epoch);
  schedule_cv_.notify_all();
  if (error) std::rethrow_exception(error);
  // Each epoch's plan knows whether it truncates; every epoch plans alike.
  schedules_[epoch] = schedule;
  return schedule;
}

void Loader::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] {
      return stop_ || (end_seq_ < 0 && claim_seq_ < consume_seq_ + options_.prefetch);
    });
    if (stop_ || end_seq_ >= 0) return;
    if (epochs_ > 0 && claim_epoch_ >= epochs_) {
      end_seq_ = claim_seq_;
      result_cv_.notify_all();
      work_cv_.notify_all();
      return;
    }
    const int64_t epoch = claim_epoch_;
    std::shared_ptr<const EpochSchedule> schedule;
    try {
      schedule = ScheduleFor(epoch, lock);
    } catch (...) {
      if (end_seq_ < 0 && claim_epoch_ == epoch) {
        Result failed;
        failed.error = std::current_exception();
        failed.epoch = epoch;
        results_[claim_seq_] = std::move(failed);
        end_seq_ = ++claim_seq_;
        result_cv_.notify_all();
        work_cv_.notify_all();
      }
      return;
    }
    if (!schedule) return;                                 // Stopped while waiting.
    if (end_seq_ >= 0 || claim_epoch_ != epoch) continue;  // Another worker moved on.
    const auto steps = static_cast<int64_t>(schedule->steps.size());
    if (steps == 0 && !EndsStream(*schedule)) {  // A mixture's block of bad records only.
      ++claim_epoch_;
      claim_step_ = 0;
      continue;
    }
    if (steps == 0) {  // Nothing left to yield in any epoch: the stream ends.
      end_seq_ = claim_seq_;
      empty_epoch_ = epoch;
      result_cv_.notify_all();
      work_cv_.notify_all();
      return;
    }
    if (claim_step_ >= steps) {
      ++claim_epoch_;
      claim_step_ = 0;
      continue;
    }
    const int64_t seq = claim_seq_++;
    const int64_t step = claim_step_++;
    if (claim_step_ >= steps) {
      ++claim_epoch_;
      claim_step_ = 0;
    }
    ++collating_;
    lock.unlock();
    Result result;
    result.epoch = epoch;
    result.step = step;
    try {
      CheckMappedFiles();  // Before reading: a file changed between batches fails here.
      const BatchView view = schedule->StepBatch(step);
      BatchLayout layout = layout_;
      layout.allow_truncate = schedule->plan.allow_truncate;
      result.examples = ExamplesStarted(view);
      result.shape = view.shape;
      result.real_elements = RealElements(view, real_lengths_.empty() ? lengths_ : real_lengths_,
                                          layout_.graph, widths_);
      if (layout_.graph) {
        for (int64_t e : view.all_examples()) {
          result.real_edges += edge_lengths_[static_cast<size_t>(e)];
        }
      }
      if (mixture_) {
        result.sources = mixture_->Tally(view, real_lengths_.empty() ? lengths_ : real_lengths_,
                                         widths_, layout_.graph);
      }
      if (patch_pack_) {
        result.arrays = CollatePatchStep(view, epoch, seq);
      } else if (cache_) {
        const GatheredBatch gathered = GatherBatch(*chunked_, *cache_, view, seq);
        result.arrays = CollateView(*gathered.dataset, gathered.view(), layout, options_.collate);
        gathered.RestoreExampleIndex(result.arrays);
      } else {
        MappedReadScope reads(&mapped_faults_);  // Shared by the workers: see CheckMappedReads.
        PrefetchExamples(*dataset_, view.all_examples());  // overlaps the gather's misses
        result.arrays = CollateView(*dataset_, view, layout, options_.collate);
      }
      if (mixture_) mixture_->TagBatch(result.arrays, options_.collate.allocator);
    } catch (...) {
      result.error = std::current_exception();
    }
    if (!mapped_files_.empty() || mapped_faults_.faulted()) {
      try {
        CheckMappedReads();
      } catch (...) {
        result.error = std::current_exception();
        result.arrays.clear();
      }
    }
    lock.lock();
    --collating_;
    results_[seq] = std::move(result);
    result_cv_.notify_all();
    // Halfway through an epoch, plan the next one ahead, so the consumer does
    // not wait for it at the boundary while other workers keep collating. A
    // mixture's block, a few dozen batches, is planned ahead from its first
    // batch: its plan takes about as long as collating it.
    const int64_t next_epoch = epoch + 1;
    if ((2 * step >= steps || mixture_) && (epochs_ == 0 || next_epoch < epochs_) && !stop_ &&
        end_seq_ < 0 && !schedules_.contains(next_epoch) && !building_.contains(next_epoch)) {
      try {
        ScheduleFor(next_epoch, lock);
      } catch (...) {
        // Built again, and the error reported, when the epoch is claimed.
      }
    }
  }
}

void Loader::EnterEpoch(int64_t epoch, const EpochSchedule& schedule) {
  if (epoch <= entered_epoch_) return;
  entered_epoch_ = epoch;
  // A planner's too_long / too_big "skip" counts as skipped, as jb.plan counts it.
  state_.dropped = SaturatingAdd(state_.dropped, schedule.plan.stats.dropped);
  state_.dropped = SaturatingAdd(state_.dropped, schedule.shard_dropped);
  state_.skipped = SaturatingAdd(state_.skipped, schedule.plan.stats.skipped);
  state_.padding_batches = SaturatingAdd(state_.padding_batches, schedule.padding_batches);
  state_.truncated = SaturatingAdd(state_.truncated, schedule.plan.stats.truncated);
  if (bad_records_.empty()) return;
  // Every epoch reaches every bad record once; a mixture's block the ones it drew.
  const int64_t reached = mixture_ ? schedule.excluded : static_cast<int64_t>(bad_records_.size());
  const BadRecord& first = bad_records_.front();
  switch (options_.on_error) {
    case ErrorPolicy::kRaise:
      // A mixture's reason names the source and its example there.
      throw InvalidArgumentError(
          StrCat(options_.source, mixture_ ? std::string() : StrCat(", example ", first.example),
                 ": ", first.reason, " (", bad_records_.size(),
                 " bad records in all; pass on_error=\"skip\" or "
                 "\"quarantine\" to drop them)"));
    case ErrorPolicy::kSkip:
      state_.skipped = SaturatingAdd(state_.skipped, reached);
      break;
    case ErrorPolicy::kQuarantine:
      state_.quarantined = SaturatingAdd(state_.quarantined, reached);
      // Each record once per run, and once per job: every shard finds the
      // same bad records, so shard 0 alone writes them (processes of a
      // multi-host job often share the file).
      // An elastic start's epoch was entered by the shards before: written.
      if (epoch == 0 && options_.schedule.shard_index == 0 && epoch != earlier_epoch_) {
        WriteQuarantine(bad_records_);
      }
      break;
  }
  // Bad records reached, not what a planner skipped: each epoch finds them
  // all; a mixture's blocks those drawn (counted as skipped or quarantined).
  const int64_t errors =
      mixture_ ? (options_.on_error == ErrorPolicy::kSkip ? state_.skipped : state_.quarantined)
               : SaturatingMul(epoch + 1, static_cast<int64_t>(bad_records_.size()));
  const int64_t seen = SaturatingMul(epoch + 1, mixture_ ? mixture_->block_size() : num_examples_);
  const bool over_count = options_.max_errors >= 0 && errors > options_.max_errors;
  const bool over_fraction =
      options_.max_error_fraction >= 0 &&
      static_cast<double>(errors) > options_.max_error_fraction * static_cast<double>(seen);
  if (over_count || over_fraction) {
    throw Error(
        StrCat("Loader: too many bad records in ", options_.source, ": ", errors, " of ", seen,
               " examples exceed ",
               over_count ? StrCat("max_errors=", options_.max_errors)
                          : StrCat("max_errors=", options_.max_error_fraction,
                                   " (a fraction of the examples reached)"),
               "; first: ", mixture_ ? std::string() : StrCat("example ", first.example, ": "),
               first.reason));
  }
}

void Loader::WriteQuarantine(const std::vector<BadRecord>& records) const {
  if (options_.quarantine_path.empty()) return;
  std::ofstream out(options_.quarantine_path, std::ios::app);
  if (!out) throw IoError(StrCat("Loader: cannot open quarantine file ", options_.quarantine_path));
  for (const BadRecord& r : records) {
    out << "{\"source\": \"" << JsonEscape(options_.source) << "\", \"example\": " << r.example
        << ", \"reason\": \"" << JsonEscape(r.reason) << "\"}\n";
  }
  if (!out)
    throw IoError(StrCat("Loader: cannot write quarantine file ", options_.quarantine_path));
}

std::optional<LoadedBatch> Loader::Next() {
  std::optional<LoadedBatch> batch;
  while (!TryNext(kMemoryStallGrace / 5, &batch)) {
  }
  return batch;
}

void Loader::CheckMemoryStall() {
  // Deadlocked when the next batch is claimed but not ready and every worker
  // collating waits in the arena: only buffers the caller holds can free it.
  const bool stalled = options_.host_memory_limit > 0 && !stop_ && end_seq_ < 0 &&
                       claim_seq_ > consume_seq_ && !results_.contains(consume_seq_) &&
                       collating_ > 0 && arena_->waiting() >= collating_;
  if (!stalled) {
    stall_since_.reset();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  const int64_t in_use = arena_->bytes_in_use();
  if (!stall_since_ || in_use != stall_bytes_in_use_) {  // Memory moved: start over.
    stall_since_ = now;
    stall_bytes_in_use_ = in_use;
    return;
  }
  if (now - *stall_since_ < kMemoryStallGrace) return;
  stall_since_.reset();
  // A streaming loader's batch buffers get only their share of the limit.
  const int64_t batch_limit = cache_ ? arena_limit_ : options_.host_memory_limit;
  const int64_t holds = largest_batch_bytes_ > 0 ? batch_limit / largest_batch_bytes_ : 0;
  throw Error(StrCat("Loader: host_memory_limit=", options_.host_memory_limit,
                     cache_
                         ? StrCat(" (", batch_limit, " for batch buffers, the rest for row groups)")
                         : std::string(),
                     " holds ", holds, " batches of up to ", largest_batch_bytes_,
                     " bytes and all are still referenced by the caller (", in_use,
                     " bytes in use), so no further batch can be made; release batches "
                     "(drop references to earlier ones) or raise host_memory_limit"));
}

bool Loader::TryNext(std::chrono::milliseconds timeout, std::optional<LoadedBatch>* out) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool closed_before = stop_;
  const bool ready = result_cv_.wait_for(lock, timeout, [&] {
    return stop_ || results_.count(consume_seq_) > 0 || (end_seq_ >= 0 && consume_seq_ >= end_seq_);
  });
  if (!ready) {
    CheckMemoryStall();
    return false;
  }
  stall_since_.reset();
  out->reset();
  if (stop_) {
    // A stream the consumer saw end stays ended. Any other is cut short, and
    // ending it quietly would pass for the end of the data (a training loop
    // would stop early and report success).
    if (ended_) return true;
    throw Error(closed_before
                    ? "Loader: closed; Next() after Close() has no batch to give (the stream had "
                      "not ended): restart it from a saved state in a new Loader"
                    : "Loader: closed while waiting for a batch (Close() was called, from "
                      "another thread?)");
  }
  if (empty_epoch_ >= 0 && consume_seq_ >= end_seq_) {
    // The stream ended at an epoch with nothing to yield: still count what
    // it left out (and raise for its bad records).
    const int64_t epoch = std::exchange(empty_epoch_, -1);
    EnterEpoch(epoch, *schedules_.at(epoch));
  }
  if (end_seq_ >= 0 && consume_seq_ >= end_seq_) {
    ended_ = true;
    return true;
  }
  if (results_.count(consume_seq_) == 0) return true;
  Result result = std::move(results_[consume_seq_]);
  results_.erase(consume_seq_);
  ++consume_seq_;
  if (result.error) {
    // The stream ends at a worker's error; the consumer sees it once.
    end_seq_ = consume_seq_;
    std::rethrow_exception(result.error);
  }
  const std::shared_ptr<const EpochSchedule> schedule = schedules_.at(result.epoch);
  try {
    // A mixture's blocks of bad records only, passed over, count theirs too.
    for (int64_t e = entered_epoch_ + 1; mixture_ && e < result.epoch; ++e) {
      if (const auto it = schedules_.find(e); it != schedules_.end()) EnterEpoch(e, *it->second);
    }
    EnterEpoch(result.epoch, *schedule);
  } catch (...) {
    end_seq_ = consume_seq_;  // A bad record under "raise" or too many errors end the stream.
    throw;
  }
  // Drop schedules of epochs the consumer has left.
  schedules_.erase(schedules_.begin(), schedules_.lower_bound(result.epoch));
  if (mixture_) {
    mixture_->Forget(result.epoch);
    for (size_t s = 0; s < result.sources.size(); ++s) {
      yielded_[s].examples = SaturatingAdd(yielded_[s].examples, result.sources[s].examples);
      yielded_[s].elements = SaturatingAdd(yielded_[s].elements, result.sources[s].elements);
    }
  }
  state_.batches = SaturatingAdd(state_.batches, 1);
  state_.examples = SaturatingAdd(state_.examples, result.examples);
  state_.real_elements = SaturatingAdd(state_.real_elements, result.real_elements);
  state_.padded_elements =
      SaturatingAdd(state_.padded_elements, PaddedElements(result.shape, layout_.graph));
  state_.real_edges = SaturatingAdd(state_.real_edges, result.real_edges);
  state_.padded_edges = SaturatingAdd(state_.padded_edges, result.shape.edges);
  state_.epoch = result.epoch;
  state_.step = result.step + 1;
  if (state_.step >= static_cast<int64_t>(schedule->steps.size())) {
    state_.epoch += 1;
    state_.step = 0;
  }
  if (state_.epoch != earlier_epoch_) state_.earlier_deals.clear();
  out->emplace(LoadedBatch{std::move(result.arrays), result.epoch, result.step, result.examples,
                           result.shape, layout_.packed});
  lock.unlock();
  work_cv_.notify_one();  // One slot freed: one worker can claim it.
  return true;
}

std::shared_ptr<const EpochSchedule> Loader::PlannedEpoch(int64_t epoch) const {
  if (epoch < 0 || (epochs_ > 0 && epoch >= epochs_)) {
    throw OutOfRangeError(StrCat("Loader: epoch ", epoch, " out of range; the stream has ",
                                 epochs_ > 0 ? StrCat(epochs_) : "endless", " epochs"));
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (const auto it = schedules_.find(epoch); it != schedules_.end()) return it->second;
    // The epoch the workers are on or about to enter: plan it once, for both.
    if (epoch == state_.epoch) {
      if (auto schedule = ScheduleFor(epoch, lock)) return schedule;  // null once closed
    }
  }
  // Lengths, exclusions and options never change after construction.
  return std::make_shared<const EpochSchedule>(MakeSchedule(epoch));
}

void Loader::InitFeatureLengths(const PackOptions& pack) {
  // A chunked source names its own length column (its first ragged one):
  // the features replace it.
  if (!chunked_ && !options_.length_column.empty() &&
      !pack.row_lengths.contains(options_.length_column)) {
    throw InvalidArgumentError(
        StrCat("Loader: Pack(row_length={...}) plans by the features it names; length_column='",
               options_.length_column, "' is not one of them"));
  }
  layout_ =
      BatchLayout{.packed = true, .allow_truncate = false, .split = false, .length_column = ""};
  for (const auto& [name, row_length] : pack.row_lengths) {
    if (!dataset_->has_column(name) || dataset_->column(name).is_fixed()) {
      throw InvalidArgumentError(StrCat("Loader: Pack's row_length names feature '", name,
                                        "', but the data has no ragged column of that name; ",
                                        "ragged columns such as '",
                                        dataset_->default_length_column(), "' can be features"));
    }
    std::vector<int64_t> lengths =
        chunked_ ? chunked_->lengths(name) : dataset_->column(name).Lengths();
    std::vector<int64_t>& into = layout_.feature_names.empty() ? lengths_ : edge_lengths_;
    into.insert(into.end(), lengths.begin(), lengths.end());
    layout_.feature_names.push_back(name);
    layout_.feature_row_lengths.push_back(row_length);
  }
  layout_.length_column = layout_.feature_names.front();
}

void Loader::InitLengths() {
  if (const auto* pack = std::get_if<PackOptions>(&options_.schedule.planner);
      pack && !pack->row_lengths.empty()) {
    return InitFeatureLengths(*pack);
  }
  const std::string& length_column =
      options_.length_column.empty() ? dataset_->default_length_column() : options_.length_column;
  if (dataset_->column(length_column).is_fixed()) {
    throw InvalidArgumentError(StrCat("Loader: column '", length_column,
                                      "' is fixed-shape; batching by length needs a ragged "
                                      "column, such as '",
                                      dataset_->default_length_column(), "'"));
  }
  lengths_ =
      chunked_ ? chunked_->lengths(length_column) : dataset_->column(length_column).Lengths();
  if (chunked_ ? chunked_->prototype->column(length_column).is_grid()
               : dataset_->column(length_column).is_grid()) {
    InitGridSizes(length_column);
  }
  if (std::holds_alternative<PatchPackOptions>(options_.schedule.planner)) {
    InitPatchPack(length_column);
  }
  const auto* pack = std::get_if<PackOptions>(&options_.schedule.planner);
  layout_ = BatchLayout{.packed = pack != nullptr || patch_pack_.has_value(),
                        .allow_truncate = false,
                        .split = YieldsPieces(options_.schedule.planner),
                        .length_column = length_column};
}

// A grid length column is planned by its heights and widths (a square or
// tied one's are equal, so its shapes are square); stats count its cells
// (RealElements over heights and widths).
void Loader::InitGridSizes(const std::string& length_column) {
  if (chunked_) {
    lengths_ = chunked_->heights(length_column);
    widths_ = chunked_->widths(length_column);
    return;
  }
  lengths_ = dataset_->column(length_column).Heights();
  widths_ = dataset_->column(length_column).Widths();
}

void Loader::InitGraphs() {
  const char* planner = PlannerName(options_.schedule.planner);
  if (chunked_ && !chunked_->graph) {
    throw InvalidArgumentError(StrCat("Loader: ", planner, " plans by node and edge counts, ",
                                      "which a chunked source keeps only when built for graphs ",
                                      "(ChunkedSourceBuilder::ForGraphs)"));
  }
  if (!options_.length_column.empty()) {
    throw InvalidArgumentError(StrCat("Loader: ", planner, " plans by node and edge counts; ",
                                      "length_column='", options_.length_column,
                                      "' does not apply"));
  }
  layout_ =
      BatchLayout{.packed = false, .allow_truncate = false, .length_column = "", .graph = true};
  if (chunked_) {  // Counted, and bad graphs found, chunk by chunk as the source was built.
    lengths_ = chunked_->node_counts;
    edge_lengths_ = chunked_->edge_counts;
    return;
  }
  const GraphColumns graph = FindGraphColumns(*dataset_, "Loader");
  lengths_ = NodeCounts(*dataset_, graph);
  edge_lengths_ = EdgeCounts(*dataset_);
  for (GraphProblem& p : FindBadGraphs(*dataset_, graph)) {
    bad_records_.push_back(BadRecord{p.example, std::move(p.reason)});
  }
}

bool Loader::EpochsMayDiffer() const {
  if (mixture_) return true;  // every block draws other examples
  // Graph batches follow the order: a shuffle changes how many there are.
  const bool ordered = std::holds_alternative<PadToMaxOptions>(options_.schedule.planner) ||
                       std::holds_alternative<PackOptions>(options_.schedule.planner) ||
                       std::holds_alternative<PatchPackOptions>(options_.schedule.planner) ||
                       IsGraphPlanner(options_.schedule.planner);
  return ordered && options_.schedule.shuffle != ShuffleMode::kNone;
}

int64_t Loader::Steps(int64_t epoch) const {
  return static_cast<int64_t>(PlannedEpoch(epoch)->steps.size());
}

int64_t Loader::TotalSteps() const {
  if (mixture_ &&
      !(mixture_->mixture().options.exhaustion == Exhaustion::kRestart && options_.epochs == 0)) {
    // Every block until the one that ends the stream (and an elastic
    // start's steps dealt before it).
    int64_t total = 0;
    for (const EarlierDeal& deal : earlier_deals_) total = SaturatingAdd(total, deal.steps);
    for (int64_t e = 0;; ++e) {
      const std::shared_ptr<const EpochSchedule> block = PlannedEpoch(e);
      if (block->steps.empty() && EndsStream(*block)) return total;
      total = SaturatingAdd(total, static_cast<int64_t>(block->steps.size()));
    }
  }
  if (epochs_ == 0) {
    throw InvalidArgumentError(
        "Loader: an endless stream (epochs=0, None in Python) has no total number of steps; "
        "count the steps of one epoch with Steps(epoch)");
  }
  if (!EpochsMayDiffer() && earlier_epoch_ < 0) return SaturatingMul(Steps(0), epochs_);
  // An elastic start's epoch: the steps dealt before it, then its remainder's.
  int64_t total = 0;
  for (const EarlierDeal& deal : earlier_deals_) total = SaturatingAdd(total, deal.steps);
  for (int64_t e = 0; e < epochs_; ++e) total = SaturatingAdd(total, Steps(e));
  return total;
}

std::vector<BatchShape> Loader::PlannedShapes(int64_t from_epoch) const {
  std::vector<BatchShape> shapes;
  if (epochs_ > 0 && from_epoch == epochs_) return shapes;  // At the end.
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Ended (at the end of the data or at an error): no batch is to come.
    if (end_seq_ >= 0 && consume_seq_ >= end_seq_) return shapes;
  }
  const int64_t last = epochs_ == 0 || !EpochsMayDiffer() ? from_epoch : epochs_ - 1;
  for (int64_t e = from_epoch; e <= last; ++e) {
    const std::shared_ptr<const EpochSchedule> schedule = PlannedEpoch(e);
    for (size_t t = 0; t < schedule->steps.size(); ++t) {
      const BatchShape shape = schedule->StepBatch(static_cast<int64_t>(t)).shape;
      if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
    }
  }
  return shapes;
}

LoaderState Loader::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  LoaderState state = state_;
  if (mixture_) state.mixture = mixture_->State(state_.epoch, yielded_);
  return state;
}

std::vector<BadRecord> Loader::quarantine() const {
  if (options_.on_error != ErrorPolicy::kQuarantine) return {};
  std::lock_guard<std::mutex> lock(mu_);
  return entered_epoch_ >= 0 ? bad_records_ : std::vector<BadRecord>{};
}

}  // namespace jaxbatch
