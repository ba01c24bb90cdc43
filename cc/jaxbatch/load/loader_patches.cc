// The Loader's PatchPack batches (NaViT): planned from the image column's
// heights and widths like any grid column (InitGridSizes), collated by
// CollatePatchBatch with the batch's epoch, so drop_percent keeps the
// patches jb.collate keeps for that epoch and a restored loader keeps them
// again. Shuffle, shard, restore and bad records are the Loader's as for
// any planner: they change which views are collated, not how.
#include <unordered_map>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/mapped_read.h"
#include "jaxbatch/collate/patch_batch.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/prefetch.h"

namespace jaxbatch {

void Loader::InitPatchPack(const std::string& length_column) {
  patch_pack_ = std::get<PatchPackOptions>(options_.schedule.planner);
  CheckPatchBatchColumns(*dataset_, length_column, "Loader");
}

std::vector<Array> Loader::CollatePatchStep(const BatchView& view, int64_t epoch, int64_t seq) {
  const std::string& column = layout_.length_column;
  if (!cache_) {
    MappedReadScope reads(&mapped_faults_);  // Shared by the workers: see CheckMappedReads.
    PrefetchExamples(*dataset_, view.all_examples());
    return CollatePatchBatch(*dataset_, column, view, *patch_pack_, epoch, options_.collate);
  }
  // The gathered dataset numbers the batch's examples from 0; the view
  // keeps the data's ids, which drop_percent and example_index follow.
  const GatheredBatch gathered = GatherBatch(*chunked_, *cache_, view, seq);
  std::unordered_map<int64_t, int64_t> row_of;
  if (!view.row_begin.empty()) {
    const std::span<const int64_t> all = view.all_examples();
    for (size_t k = 0; k < all.size(); ++k) row_of.emplace(all[k], gathered.examples[k]);
  }
  return CollatePatchBatch(*gathered.dataset, column, view, *patch_pack_, epoch, options_.collate,
                           [&row_of](int64_t e) { return row_of.at(e); });
}

}  // namespace jaxbatch
