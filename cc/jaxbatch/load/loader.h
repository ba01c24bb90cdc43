// Loader: the C++ input pipeline. Worker threads plan, collate and prefetch
// batches into reused buffers; the consumer takes them in a deterministic
// order whatever the thread count.
//
//   - Each epoch's schedule (schedule.h) is a pure function of the seed and
//     epoch, so the stream is byte-identical for any num_threads and a
//     checkpoint is (seed, epoch, step) plus counters: O(1) in size.
//   - Examples that break the schema (schema.h) are found once, up front,
//     and follow the error policy: raise, skip (counted) or quarantine
//     (counted and recorded with their reason, optionally to a JSONL file).
//   - Output buffers come from a BufferArena and return to it when the
//     consumer lets go, so steady state allocates nothing per batch.
//   - An exception in a worker reaches the consumer, from Next(), with its
//     original message. Close() (or the destructor) ends every thread; a
//     Next() it cuts short throws rather than pass for the end of the data.
//
// Example:
//   LoaderOptions options;
//   options.schedule.planner = AutoBucketsOptions{.max_shapes = 8, .token_budget = 65536};
//   Loader loader(dataset, options);
//   while (std::optional<LoadedBatch> batch = loader.Next()) Train(batch->arrays);
#ifndef JAXBATCH_LOAD_LOADER_H_
#define JAXBATCH_LOAD_LOADER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "jaxbatch/base/arena.h"
#include "jaxbatch/base/file_stamp.h"
#include "jaxbatch/base/mapped_read.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/load/chunk_cache.h"
#include "jaxbatch/load/chunked_source.h"
#include "jaxbatch/load/mixture.h"
#include "jaxbatch/load/schedule.h"
#include "jaxbatch/load/schema.h"

namespace jaxbatch {

enum class ErrorPolicy { kRaise, kSkip, kQuarantine };
inline constexpr ErrorPolicy kDefaultErrorPolicy = ErrorPolicy::kRaise;

// "raise", "skip" or "quarantine": the text options and messages use.
const char* ErrorPolicyName(ErrorPolicy policy);
// Throws InvalidArgumentError naming the names it knows.
ErrorPolicy ParseErrorPolicy(std::string_view name);

inline constexpr int64_t kDefaultPrefetch = 4;
inline constexpr int64_t kMaxDefaultThreads = 8;
// How long the workers may all wait for memory that only the consumer can
// give back, while the consumer waits for a batch, before Next() calls it a
// deadlock (the caller keeps more batches than host_memory_limit holds). Long
// enough for another of the caller's threads to let go of a batch it works on.
inline constexpr std::chrono::milliseconds kMemoryStallGrace{1000};

struct LoaderOptions {
  ScheduleOptions schedule;
  std::string length_column;  // "" = the dataset's first ragged column
  int64_t num_threads = 0;    // 0 = hardware threads, at most kMaxDefaultThreads (a streamed
                              // source's: as many as host_memory_limit holds); <= kMaxThreads
  int64_t prefetch = kDefaultPrefetch;  // ready batches kept ahead of the consumer
  int64_t epochs = 1;                   // 0 = forever
  ErrorPolicy on_error = kDefaultErrorPolicy;
  int64_t max_errors = -1;           // bad records allowed in all; -1 = no limit
  double max_error_fraction = -1.0;  // bad records / examples allowed; < 0 = no limit
  Schema schema;
  CollateOptions collate;          // the loader sets its allocator
  int64_t host_memory_limit = 0;   // bytes of batches alive at once; 0 = no limit
  std::string quarantine_path;     // JSONL file quarantined records are appended to
  std::string source = "dataset";  // how errors name the data
  // Files the dataset's memory maps read. Each batch re-checks their stamps
  // before and after its reads and fails with IoError naming the file if one
  // changed. A read past the end of a file truncated in between is an
  // IoError naming the file too, not a SIGBUS (base/mapped_read.h), for any
  // file mapping the data reads, listed here or not.
  std::vector<std::string> mapped_files;
};

// Validates everything about `options` that does not need the data or the
// planner (which ValidatePlannerOptions checks): the schedule
// (ValidateScheduleOptions), prefetch, epochs, num_threads, max_errors and
// host_memory_limit. Throws InvalidArgumentError naming the option, its
// message starting with `who` (the call the user wrote: jb.run checks the
// options of the Loader it opens); the Loader calls both first.
void ValidateLoaderOptions(const LoaderOptions& options, std::string_view who = "Loader");

// 2: block shuffle keeps the planner's batch order (1 shuffled it).
// 3: AutoBuckets with remainder pad fills the last batches' empty rows (1
// and 2 left them empty; a Loader restoring one plans as they did).
// 4: a budget's rows a batch are balanced over each shape's batches
// (plan/balance.h; 1 to 3 kept the budget's rows, and are restored so).
inline constexpr int64_t kLoaderStateVersion = 4;
// From this version on every state holds each counter and its data's
// fingerprint, so one without them was edited or made by hand, and is
// refused naming the field (an older version's may lack them: its counters
// count from 0 and its data is checked by its size only).
inline constexpr int64_t kCompleteStateVersion = 3;

// What makes a loader's stream besides its seed and position. A state
// restores only into a loader whose key is the same; the Loader refuses any
// other, naming what differs.
struct StreamKey {
  int64_t version = kLoaderStateVersion;
  int64_t num_examples = 0;
  // LayoutFingerprint of the data; absent in states saved before it was added.
  std::optional<uint64_t> fingerprint = std::nullopt;
  std::string planner = {};  // PlannerKey (or one an earlier release stored)
  ShuffleMode shuffle = kDefaultShuffle;
  int64_t block_size = kDefaultBlockSize;
  int64_t shard_index = 0;
  int64_t shard_count = 1;
};

// Where a loader is and what it has counted: restoring it continues with
// exactly the batches an uninterrupted run would have produced.
struct LoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t step = 0;  // the next batch to yield within `epoch`
  int64_t batches = 0;
  int64_t examples = 0;         // examples yielded
  int64_t skipped = 0;          // bad records under "skip", and too_long/too_big="skip"
  int64_t quarantined = 0;      // bad records dropped under "quarantine"
  int64_t dropped = 0;          // examples left out by the remainder policy (plan or shards)
  int64_t padding_batches = 0;  // empty batches that even out shards
  int64_t truncated = 0;        // examples cut to their batch's shape by too_long="truncate"
  // Of the batches yielded: real and padded elements (a graph batch's
  // nodes), and a graph batch's real and padded edges.
  int64_t real_elements = 0;
  int64_t padded_elements = 0;
  int64_t real_edges = 0;
  int64_t padded_edges = 0;
  // Set by Loader::state(). A state made by hand without one is checked for
  // its seed and position only.
  std::optional<StreamKey> key = std::nullopt;
  // A mixture's (load/mixture.h): where the block `epoch` starts, per
  // source, and each source's yield. For a mixture, `epoch` counts blocks.
  std::optional<MixtureState> mixture = std::nullopt;
  // How `epoch` was dealt before this loader's shards took over (an elastic
  // resume, load/elastic.h): `step` counts the steps of the last deal, which
  // deals what these left. Empty: the epoch is dealt to this loader's shards
  // from its start.
  std::vector<EarlierDeal> earlier_deals = {};
};

struct LoadedBatch {
  std::vector<Array> arrays;
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t examples = 0;
  BatchShape shape;  // rows x length (x segments when packed) of the planned batch
  bool packed = false;
};

class Loader {
 public:
  // Validates options and the dataset against the schema (before any thread
  // starts) and starts the workers at `start` (or the beginning). Throws
  // Error, with no thread left running, when the system cannot start one.
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options,
         std::optional<LoaderState> start = std::nullopt);
  // Streams `source` chunk by chunk. host_memory_limit is required and holds
  // everything the loader keeps: (prefetch + 2) batch buffers and one gather
  // per worker (each up to the largest batch), one chunk being decoded, and
  // the rest (at least one chunk) caches decoded chunks. Throws
  // InvalidArgumentError when it cannot, naming what each part needs. The
  // schema was applied when the source was built: options.schema must be
  // empty and options.length_column "" or the source's. Nothing is read
  // until a feeder calls NextChunkRequest / ProvideChunk from its own thread.
  // Example (the feeder):
  //   for (int64_t c; (c = loader.NextChunkRequest(50ms)) != ChunkCache::kClosed;) {
  //     if (c >= 0) loader.ProvideChunk(c, DecodeRowGroup(c));
  //   }
  Loader(std::shared_ptr<const ChunkedSource> source, LoaderOptions options,
         std::optional<LoaderState> start = std::nullopt);
  // Draws `mixture`'s sources into one stream (load/mixture.h), planned
  // block by block: an epoch of this loader is one block, and
  // options.epochs counts passes over all the sources' examples (kRestart;
  // 0: endless) or must be 1 (kStop, kDrop: the mixture ends the stream).
  // Every batch carries source_index; a planner whose shapes follow the
  // data plans every block with the shapes it picks once (FreezeShapes).
  // Throws InvalidArgumentError for sources whose columns differ.
  Loader(std::shared_ptr<const Mixture> mixture, LoaderOptions options,
         std::optional<LoaderState> start = std::nullopt);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch, or nullopt at the end (and on every call after it).
  // Rethrows a worker's exception; throws InvalidArgumentError for a bad
  // record under ErrorPolicy::kRaise and Error when max_errors is exceeded.
  // Throws Error when every buffer host_memory_limit allows is held by the
  // caller, so no batch can ever be made (it would otherwise wait forever),
  // and when the loader is closed before the end, before or during the call:
  // a stream cut short must not pass for one that ended.
  std::optional<LoadedBatch> Next();

  // Next() that waits at most `timeout`: returns true with `*batch` set
  // (nullopt at the end), or false when no batch is ready yet; a caller that
  // must stay interruptible (Python's Ctrl-C) calls it in short slices. It
  // throws what Next() throws, a Close() from another thread included.
  // Example:
  //   std::optional<LoadedBatch> batch;
  //   while (!loader.TryNext(std::chrono::milliseconds(50), &batch)) CheckForSignals();
  bool TryNext(std::chrono::milliseconds timeout, std::optional<LoadedBatch>* batch);

  // The chunk a streaming loader needs read next; ChunkCache::kNoRequest
  // after `timeout`, ChunkCache::kClosed once closed or failed (the feeder
  // then ends). Throws InvalidArgumentError for a loader over a Dataset.
  int64_t NextChunkRequest(std::chrono::milliseconds timeout);
  // Hands over `chunk` as decoded: checks it against the source and copies
  // it (the loader keeps no reference to `decoded`). A chunk that differs
  // from what the source recorded fails like FailChunk, with IoError that
  // is also thrown here.
  void ProvideChunk(int64_t chunk, const Dataset& decoded);
  // `chunk` (from NextChunkRequest) cannot be read: the first batch that
  // needs it ends the stream, Next() throwing IoError with `message` (which
  // names the file and chunk); the batches before it are still yielded.
  // chunk = -1: the reader itself stopped; every chunk fails.
  void FailChunk(int64_t chunk, const std::string& message);
  // Chunks provided so far (0 for a loader over a Dataset): more than the
  // source's chunk count per epoch means chunks were read again.
  int64_t chunk_reads() const { return cache_ ? cache_->reads() : 0; }
  // The bytes of decoded chunks the cache may hold (0 for a Dataset).
  int64_t chunk_cache_bytes() const { return cache_ ? cache_->capacity_bytes() : 0; }

  LoaderState state() const;
  // Throws InvalidArgumentError, naming what differs, when `state` cannot
  // continue this loader's stream (another seed or stream key, a negative
  // counter, a position past the end), as Loader(..., state) would; changes
  // nothing. A caller that restores by making a new Loader checks first, so
  // a refused state leaves this one running as it was.
  void CheckState(const LoaderState& state) const;

  // What the stream will yield, exactly (it plans the epochs it needs,
  // without the workers). Steps(epoch): this process's steps in `epoch`.
  // TotalSteps(): every step of the stream (all epochs; InvalidArgumentError
  // for epochs = 0, which never ends). PlannedShapes(): the distinct batch
  // shapes of every epoch from `from_epoch` on (just that epoch's for an
  // endless stream), in the order the steps first use them: what to compile
  // ahead; none once the stream has ended (at its end, or at the error that
  // ended it). Throws OutOfRangeError for an epoch past the stream's end.
  // After an elastic start (LoaderState::earlier_deals), Steps of its epoch
  // counts the steps left to this loader and TotalSteps adds those dealt
  // before.
  int64_t Steps(int64_t epoch) const;
  int64_t TotalSteps() const;
  std::vector<BatchShape> PlannedShapes(int64_t from_epoch = 0) const;
  // What a start state of another mixture changed (weights, sources), one
  // line each; empty when nothing did, or for a loader over a dataset.
  std::vector<std::string> mixture_changes() const;
  // One pass of this loader's mixture from its start, as its blocks draw it
  // (bad records included: the blocks count them): each position's source,
  // its example there and its real elements (what unit="tokens" weighs and
  // the stats count), and the weights of the last block. What jb.run
  // processes of a mixture. Throws InvalidArgumentError for a loader over
  // one dataset or an endless stream (epochs 0).
  // Example:
  //   MixturePass pass = loader.DrawMixturePass();  // pass.sources[p], pass.examples[p]
  struct MixturePass {
    std::vector<int64_t> sources;
    std::vector<int64_t> examples;
    std::vector<int64_t> tokens;
    std::vector<int64_t> weights;  // per source, WeightsFromShares' integers
  };
  MixturePass DrawMixturePass() const;
  // Every quarantined record (each once, in example order).
  std::vector<BadRecord> quarantine() const;
  int64_t num_threads() const { return static_cast<int64_t>(workers_.size()); }
  const BufferArena& arena() const { return *arena_; }

  // Stops and joins every worker; idempotent. A Next() waiting in another
  // thread, and every later one, then throws Error, unless the consumer
  // already saw the stream end (nullopt stays the answer).
  void Close();

 private:
  Loader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const ChunkedSource> source,
         std::shared_ptr<const Mixture> mixture, LoaderOptions options,
         std::optional<LoaderState> start);

  struct Result {
    std::vector<Array> arrays;
    std::exception_ptr error;
    int64_t epoch = 0;
    int64_t step = 0;
    int64_t examples = 0;
    BatchShape shape;
    int64_t real_elements = 0;
    int64_t real_edges = 0;
    std::vector<SourceTally> sources;  // a mixture's batch: each source's yield
  };
  // `epoch`'s schedule, planned now: the dataset's epoch, or the mixture's block.
  EpochSchedule MakeSchedule(int64_t epoch) const;
  // The same with `schedule`, a mixture's block drawn by `mixture` (one
  // that is not the loader's when a state is only checked), and what
  // `earlier_deals` (an elastic start's) left of it dealt to this shard.
  EpochSchedule MakeSchedule(int64_t epoch, const ScheduleOptions& schedule,
                             const MixtureStream* mixture,
                             const std::vector<EarlierDeal>& earlier_deals) const;
  // A mixture's, after the lengths: the stream, its block planner, its
  // bad records named by source.
  void InitMixture(std::shared_ptr<const Mixture> mixture);
  // A stream of the loader's mixture as InitMixture made it, before any
  // state was restored into it.
  std::unique_ptr<MixtureStream> NewMixtureStream() const;
  // Each example's tokens as a mixture weighs them (MixtureStream's `tokens`).
  std::vector<int64_t> MixtureTokens() const;
  // Whether `schedule` (with no steps) ends the stream: a mixture's block
  // with no steps may only have drawn bad records; the next may have some.
  bool EndsStream(const EpochSchedule& schedule) const;
  // `epoch`'s schedule: the workers' when they hold it; the consumer's
  // epoch is planned once and kept for the workers (shapes asked before the
  // first batch do not plan it twice); any other is planned now, not kept
  // (epochs far ahead would hold memory). Throws what planning throws.
  std::shared_ptr<const EpochSchedule> PlannedEpoch(int64_t epoch) const;
  // Whether epochs can differ in steps or shapes: a shuffled PadToMax or
  // Pack (buckets' batch counts and shapes do not depend on the order).
  bool EpochsMayDiffer() const;

  // Throws InvalidArgumentError for a start state of another seed, with a
  // negative counter, a position past the stream's end or its epoch's last
  // step, a key of another stream, or a mixture's part this mixture cannot
  // continue; returns that epoch's schedule (planned as the state's version
  // did) when the state is inside it, else null. A mixture's part is
  // restored into `mixture` (the loader's own stream when it starts from
  // the state, a new one when the state is only checked), each source's
  // yield so far into `yielded`; nothing of the loader's own changes.
  std::shared_ptr<const EpochSchedule> CheckStart(const LoaderState& start, MixtureStream* mixture,
                                                  std::vector<SourceTally>* yielded) const;
  void CheckStreamKey(const StreamKey& key) const;
  // Plans as loader state `version` (< kLoaderStateVersion) did: before 3
  // AutoBuckets left remainder rows empty, before 4 a budget's rows were not
  // balanced. Keeps the version in the states it saves.
  void PlanAsVersion(int64_t version);
  // lengths_ and layout_ from the length column (sequence planners) or the
  // graphs' node and edge counts, whose bad graphs join bad_records_.
  void InitLengths();
  void InitFeatureLengths(const PackOptions& pack);
  void InitGraphs();
  void InitGridSizes(const std::string& length_column);
  // A PatchPack (loader_patches.cc): its options, and its image column's
  // columns checked (CheckPatchBatchColumns) before any batch.
  void InitPatchPack(const std::string& length_column);
  // Collates a PatchPack batch of `epoch` (which patches drop_percent
  // keeps), from the dataset or gathered from the chunks it needs.
  std::vector<Array> CollatePatchStep(const BatchView& view, int64_t epoch, int64_t seq);
  void WorkerLoop();
  // Throws IoError naming a mapped file whose size or modification time
  // differs from when the loader started.
  void CheckMappedFiles() const;
  // After a batch's reads, whatever they produced or threw: CheckMappedFiles
  // (a read past a truncated file's end inside its last page finds zeros
  // with no fault), then IoError naming the file if a read of any worker
  // faulted past a file's end. The faults are shared and sticky: every batch
  // after one fails too, as it may read the zeros the fault left.
  void CheckMappedReads() const;
  // Throws InvalidArgumentError when host_memory_limit cannot hold the
  // batches in flight (which would wait forever); plans the first epoch.
  void CheckMemoryLimit();
  // Without host_memory_limit: throws InvalidArgumentError, naming the
  // bytes, when the largest batch is more than the machine has available
  // (base/available_memory.h), which would have the process killed.
  void CheckBatchFitsMachine();
  // Plans the start epoch (kept for the workers) and sets
  // largest_batch_bytes_ and largest_shape_ from its shapes.
  void MeasureLargestBatch();
  // Splits host_memory_limit between batch buffers, `threads` gathers and
  // the chunk cache of a streaming loader (see its constructor) and returns
  // the threads to start: `automatic` ones (num_threads = 0) are lowered to
  // fit the limit, at least one. Throws InvalidArgumentError when the cache
  // cannot hold one chunk.
  int64_t SizeChunkCache(int64_t threads, bool automatic);
  // Returns the schedule of `epoch`, building it (outside the lock) if no
  // other worker is. `lock` is held on entry and exit.
  std::shared_ptr<const EpochSchedule> ScheduleFor(int64_t epoch,
                                                   std::unique_lock<std::mutex>& lock) const;
  // Counts an epoch's bad and dropped examples once, when the consumer enters it.
  void EnterEpoch(int64_t epoch, const EpochSchedule& schedule);
  void WriteQuarantine(const std::vector<BadRecord>& records) const;
  // Throws Error when the consumer waits for a batch while every worker that
  // collates one waits for memory the caller holds, and nothing has come
  // back for kMemoryStallGrace. Called with mu_ held.
  void CheckMemoryStall();

  std::shared_ptr<const Dataset> dataset_;  // a streaming loader's: the source's prototype
  std::shared_ptr<const ChunkedSource> chunked_;
  std::unique_ptr<ChunkCache> cache_;
  std::unique_ptr<MixtureStream> mixture_;
  // What mixture_ was made from, to make another (CheckState).
  std::shared_ptr<const Mixture> mixture_spec_;
  PlannerOptions mixture_planner_;
  std::vector<SourceTally> yielded_;  // a mixture's, per source, of the batches yielded
  // Epochs the stream has: options_.epochs, or 0 for a mixture (its blocks
  // end where the mixture does).
  int64_t epochs_ = 0;
  LoaderOptions options_;
  // options_.schedule as given, before a restored older state's version
  // changed how it plans (PlanAsVersion): what states are checked against.
  ScheduleOptions requested_;
  int64_t num_examples_ = 0;
  std::vector<int64_t> lengths_;  // node counts for a graph planner
  // Edge counts for a graph planner; for a Pack with several features the
  // features after the first, feature after feature (Plan()'s `edges`).
  std::vector<int64_t> edge_lengths_;
  // A grid length column's widths (lengths_ then holds its heights); empty
  // for 1-D data.
  std::vector<int64_t> widths_;
  // A Pack with several features: each example's elements over them, cut
  // to their row lengths (the real elements a batch reports). Else empty.
  std::vector<int64_t> real_lengths_;
  // A PatchPack's options (real_lengths_ then holds each image's kept
  // patches); unset for other planners.
  std::optional<PatchPackOptions> patch_pack_;
  std::vector<uint8_t> excluded_;
  std::vector<BadRecord> bad_records_;
  StreamKey key_;  // this loader's, in every state()
  struct MappedFile {
    std::string path;
    FileStamp stamp;  // when the loader started
  };
  std::vector<MappedFile> mapped_files_;
  MappedReadFaults mapped_faults_;  // of reads of the dataset, by any thread
  BatchLayout layout_;
  std::unique_ptr<BufferArena> arena_;
  int64_t arena_limit_ = 0;  // a streaming loader's share of host_memory_limit for batches

  std::mutex close_mu_;  // serialises Close()
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable result_cv_;
  // Planned epochs are a cache: PlannedEpoch (const) may fill it.
  mutable std::condition_variable schedule_cv_;  // an epoch's schedule finished building
  mutable std::map<int64_t, std::shared_ptr<const EpochSchedule>> schedules_;
  mutable std::set<int64_t> building_;  // epochs whose schedule a worker is building
  int64_t claim_epoch_ = 0;
  int64_t claim_step_ = 0;
  int64_t claim_seq_ = 0;
  int64_t consume_seq_ = 0;
  int64_t end_seq_ = -1;      // set once the last position is claimed
  int64_t empty_epoch_ = -1;  // the epoch with no steps that ended the stream
  bool ended_ = false;        // the consumer was given the end (nullopt)
  std::map<int64_t, Result> results_;
  LoaderState state_;
  // A start state's earlier deals, and the epoch they are of (-1: none).
  std::vector<EarlierDeal> earlier_deals_;
  int64_t earlier_epoch_ = -1;
  int64_t entered_epoch_ = -1;
  int64_t largest_batch_bytes_ = 0;  // of the first epoch's plan, once measured
  BatchShape largest_shape_;
  int64_t collating_ = 0;  // workers collating a batch (outside mu_)
  std::optional<std::chrono::steady_clock::time_point> stall_since_;
  int64_t stall_bytes_in_use_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_LOADER_H_
