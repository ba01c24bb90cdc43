// Shared declarations of the nanobind bindings. Bindings translate between
// Python and the core and hold no logic a C++ user would need.
#ifndef JAXBATCH_BINDINGS_BINDINGS_H_
#define JAXBATCH_BINDINGS_BINDINGS_H_

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "jaxbatch/data/dtype.h"

namespace jaxbatch::bindings {

namespace nb = nanobind;

using Int64Array = nb::ndarray<nb::numpy, const int64_t, nb::ndim<1>>;
using ByteInput = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Int64Input = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void BindData(nb::module_& m);
void BindPlan(nb::module_& m);
void BindCollate(nb::module_& m);
void BindLoad(nb::module_& m);
void BindJob(nb::module_& m);

// The DLPack dtype numpy understands for `dtype`; bfloat16 travels as
// uint16 and the Python layer views it as ml_dtypes.bfloat16.
nb::dlpack::dtype ToDLPack(DType dtype);

// A numpy array over `data` that keeps `owner` alive, with no copy.
nb::ndarray<nb::numpy> WrapArray(void* data, DType dtype, const std::vector<int64_t>& shape,
                                 std::shared_ptr<void> owner);

// A numpy int64 array that takes ownership of `values`.
Int64Array ToNumpy(std::vector<int64_t> values);

}  // namespace jaxbatch::bindings

#endif  // JAXBATCH_BINDINGS_BINDINGS_H_
