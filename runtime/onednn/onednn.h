// The thin layer between fuselage's kernels and oneDNN (Debian's libdnnl 2.6, which picks
// its ISA at run time, so the kernels get AVX-512 / VNNI on a baseline x86-64 build):
// the CPU engine, plain memory descriptors over fuselage's row-major buffers, reorders to
// and from the layouts a primitive prefers, and the conversion of oneDNN's exceptions into
// absl::Status.
//
// Primitive reuse: oneDNN keeps its own thread-safe cache of primitives keyed by the full
// primitive descriptor (shapes, strides, padding, dilation, groups, data types, layouts,
// attributes: scales / zero-point masks, post-ops), default capacity 1024
// (ONEDNN_PRIMITIVE_CACHE_CAPACITY). Kernels build the descriptor for every call and
// construct the primitive from it, so a primitive is compiled once per distinct key and
// reused afterwards. Zero points are passed as run-time arguments, never baked into a
// primitive, and int8 output scales are in the descriptor's attributes, hence in the key,
// so no call can pick up a stale primitive.
//
// Convolutions go further (ConvPlan in onednn.cc): the primitive, its layouts and the
// reorders from / to the caller's NC[D]HW buffers are built once per key and kept, since
// choosing an implementation is itself costly. The key holds everything above (geometry,
// types, bias, and the int8 attributes: output scales by value, relu, whether a source
// zero point is subtracted; and OpenMP's thread count of the calling thread, which a
// primitive fixes at creation); zero point values stay run-time arguments. Float
// activations use oneDNN's channel-blocked layout (nChw16c, else nChw8c; as PyTorch's
// ideep does) when a jit kernel exists for it, not the channels-last layout oneDNN picks
// by itself on AVX-512, whose reorders to and from NCHW are full transposes (as slow as a
// depthwise convolution). int8 convolutions keep oneDNN's own layout choice (on x86,
// channels-last; offered the blocked ones, mobilenet_v2's int8 convs got no kernel for
// them); a plan moves a channels-last source or destination of 1- or 4-byte elements with
// channels_last.h's tile transposes, several times faster than oneDNN's u8 / s32 reorders.
//
// Weight reuse: a convolution's weights are reordered to the primitive's preferred
// (blocked) layout once per (weight tensor buffer, layout), not on every call, when the
// caller names the tensor they come from (ConvBuffers::weights_owner). A cache entry holds
// a reference to that tensor's buffer, so its address cannot be reused by another tensor
// while the entry exists, and a write to the tensor detaches the writer from the shared
// buffer first (copy-on-write, graph/tensor.h): an entry is never stale. Weights whose
// bytes are borrowed (Tensor::borrows_bytes: their owner may write them) are reordered on
// every call instead. The cache is
// process-wide, thread-safe and bounded (kMaxCachedWeightBytes; past it, it starts over).
// Plans and reordered weights are each made once: a thread that needs one another thread
// is making waits for it rather than making it too (calibration runs samples at once,
// which reach the same layers together).
#ifndef FUSELAGE_RUNTIME_ONEDNN_ONEDNN_H_
#define FUSELAGE_RUNTIME_ONEDNN_ONEDNN_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "graph/tensor.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace fuselage {
namespace onednn {

// The process's CPU engine. Created once on first use (thread-safe static) and never
// changed afterwards, so it is shared read-only state, not mutable state.
const dnnl::engine& CpuEngine();

// Runs `body` (which builds and executes primitives on `stream`), and waits for it.
// oneDNN reports unsupported configurations and allocation failures by throwing
// dnnl::error; that becomes an InternalError naming `op`.
absl::Status Run(absl::string_view op, const std::function<void(dnnl::stream&)>& body);

// A plain dense row-major descriptor ("abcd...") of `dims` and `type`.
dnnl::memory::desc PlainDesc(const std::vector<int64_t>& dims, dnnl::memory::data_type type);

// A memory over the caller's buffer (not owned) with a plain layout.
dnnl::memory PlainMemory(const std::vector<int64_t>& dims, dnnl::memory::data_type type,
                         const void* data);

// `m` itself when its layout already is `desc`, otherwise a new memory of `desc` holding
// m's values (reordered on `stream`).
dnnl::memory ToLayout(const dnnl::memory& m, const dnnl::memory::desc& desc,
                      dnnl::stream& stream);

// Geometry of an N-d convolution (N = 1, 2, 3 spatial dims) in PyTorch's terms.
struct ConvGeometry {
  std::vector<int64_t> src;      // [N, C, *S]
  std::vector<int64_t> weights;  // [O, C / groups, *K] (PyTorch's layout)
  std::vector<int64_t> dst;      // [N, O, *OS]
  std::vector<int64_t> stride, padding, dilation;  // per spatial dim, PyTorch's (dilation >= 1)
  int64_t groups = 1;
};

// oneDNN's int8 post-processing of the exact int32 accumulator, as PyTorch 1.13's onednn
// engine configures it: for output channel c, in float32 and rounded step by step,
//   dst = saturate(nearbyint(relu?((acc + bias[c]) * scales[c]) + zero_point))
// (the bias being ConvBuffers::bias, already multiplied by x_scale * w_scale[c]; see
// runtime/quantized/output_requantizer.h). The zero point is a run-time argument (one
// primitive serves every value); the scales are part of the primitive (oneDNN 2.6's
// convolutions take no run-time scales) and so of the primitive cache's key.
struct Int8Output {
  const float* scales = nullptr;  // one per output channel
  int32_t zero_point = 0;
  bool relu = false;
};

// Bytes of reordered weights the process keeps (see "Weight reuse" above).
inline constexpr size_t kMaxCachedWeightBytes = size_t{1} << 30;

// How many reordered weights the cache holds now (for tests and benchmarks).
size_t CachedWeightCount();

// How many convolution plans are kept now (one per distinct key; for tests).
size_t CachedConvPlanCount();

struct ConvBuffers {
  const void* src = nullptr;
  const void* weights = nullptr;
  // The tensor `weights` is the data of (a module's own weight), so its reordered form can
  // be cached; null for a temporary (computed per call), which is reordered every call.
  const Tensor* weights_owner = nullptr;
  const float* bias = nullptr;  // [O] float32, or null
  void* dst = nullptr;
  // The source is given channels-last ([N, *spatial, C]) rather than NC[D]HW.
  bool src_channels_last = false;
  // Non-null: the caller also takes the destination channels-last ([N, *spatial, C]) when
  // the primitive produces that layout, and is told whether it came so; it then skips the
  // transpose back to NC[D]HW (a caller that requantizes accumulators per channel can do
  // that on the channels-last rows and move only the 1-byte result).
  bool* dst_channels_last = nullptr;
};

// Forward convolution over plain NC[D]HW buffers with oneDNN's direct kernels:
// f32 x f32 -> f32 (float conv), or int8: u8/s8 source with `src_zero_point` subtracted
// from every source value (padding included as a real 0) x s8 weight -> either s32 (the
// exact accumulator; no bias) or, with `int8_output`, u8/s8 requantized by it.
// The primitive picks its own layouts; src / weights / dst are reordered as needed.
absl::Status Convolution(absl::string_view op, const ConvGeometry& geometry,
                         dnnl::memory::data_type src_type, dnnl::memory::data_type weight_type,
                         dnnl::memory::data_type dst_type, const ConvBuffers& buffers,
                         int32_t src_zero_point = 0, const Int8Output* int8_output = nullptr);

// Transposed convolution (oneDNN's deconvolution, direct) over plain buffers without
// padding or zero points: dst [N, O, *D] with D = (S - 1) * stride + dilation * (K - 1) + 1,
// dst[n, o, s * stride + k * dilation] += src[n, c, s] * w[o, c, k] per group. The
// geometry's `weights` are oneDNN's [O, C / groups, *K] (PyTorch's transposed-conv weight
// [C, O / groups, *K] must be rearranged by the caller); `padding` is ignored (all 0).
// Types as Convolution without int8_output: u8/s8 x s8 -> s32 exact, or f32.
absl::Status Deconvolution(absl::string_view op, const ConvGeometry& geometry,
                           dnnl::memory::data_type src_type, dnnl::memory::data_type weight_type,
                           dnnl::memory::data_type dst_type, const ConvBuffers& buffers);

// dst[M, N] = src[M, K] x weights[N, K]^T (+ bias[N]) over plain row-major buffers (the
// weight in PyTorch's [out, in] layout): f32 x f32 -> f32, or u8/s8 x s8 -> s32 with
// `src_zero_point` subtracted from every source value -> s32 (no bias) or, with
// `int8_output`, u8/s8 as for Convolution. M, K, N > 0.
// The primitive is made once per key (sizes, types, bias, int8 attributes, weight layout,
// thread count; zero point values stay run-time arguments) and kept, as a convolution's
// plan is. `weights_owner`, when it is the tensor `weights` is the data of and owns its
// bytes (not borrowed), lets the weight be reordered once to the layout the primitive
// prefers and cached ("Weight reuse" above); otherwise the plain weight is read in place.
absl::Status MatMul(absl::string_view op, int64_t m, int64_t k, int64_t n,
                    dnnl::memory::data_type src_type, dnnl::memory::data_type weight_type,
                    dnnl::memory::data_type dst_type, const void* src, const void* weights,
                    const float* bias, void* dst, int32_t src_zero_point = 0,
                    const Int8Output* int8_output = nullptr,
                    const Tensor* weights_owner = nullptr);

// dst[B, M, N] = a[B, M, K] x b[B, K, N] in f32 over plain row-major buffers: matmul / bmm
// of two activations (neither a constant worth packing). The primitive is kept per
// (B, M, K, N, thread count) as MatMul's. B, M, K, N > 0.
absl::Status BatchedMatMul(absl::string_view op, int64_t batch, int64_t m, int64_t k,
                           int64_t n, const float* a, const float* b, float* dst);

// How many matmul primitives are kept now (one per distinct key; for tests).
size_t CachedMatMulPlanCount();

}  // namespace onednn
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_ONEDNN_ONEDNN_H_
