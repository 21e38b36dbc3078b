#include "runtime/onednn/onednn.h"

#include <omp.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/onednn/channels_last.h"

namespace fuselage {
namespace onednn {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::memory::format_tag PlainTag(size_t rank) {
  switch (rank) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    default: return tag::abcdef;
  }
}

dnnl::memory::dims Dims(const std::vector<int64_t>& v) {
  return dnnl::memory::dims(v.begin(), v.end());
}

bool IsInt8(dt type) { return type == dt::u8 || type == dt::s8; }

// oneDNN's channel-blocked activation layout of `rank` dims with `block` channels per
// block (nCw16c, nChw16c, nCdhw16c and the 8-channel forms).
tag ChannelBlockedTag(size_t rank, int block) {
  switch (rank) {
    case 3: return block == 16 ? tag::aBc16b : tag::aBc8b;
    case 4: return block == 16 ? tag::aBcd16b : tag::aBcd8b;
    default: return block == 16 ? tag::aBcde16b : tag::aBcde8b;
  }
}

// A convolution's primitive, its layouts and the reorders between them and the caller's
// plain buffers, built once per key (ConvPlanCache) instead of on every call: choosing
// an implementation (primitive_desc) and the reorders' descriptors is work oneDNN's own
// primitive cache does not save.
struct ConvPlan {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward primitive;
  dnnl::memory::desc src_plain, dst_plain;
  dnnl::reorder src_reorder, dst_reorder;  // empty when the layout is already plain
  dnnl::memory::desc src_reorder_scratchpad, dst_reorder_scratchpad;
  // Source / destination in channels-last layout, of 1- or 4-byte elements: moved by
  // channels_last.h's tile transposes instead of the reorders above (oneDNN's u8 and s32
  // ones cost more than an int8 convolution).
  bool src_channels_last = false, dst_channels_last = false;
};

// The channels-last layout (nwc, nhwc, ndhwc) of `dims` [N, C, *spatial].
dnnl::memory::desc ChannelsLastDesc(const std::vector<int64_t>& dims, dt type) {
  const tag t = dims.size() == 3 ? tag::acb : dims.size() == 4 ? tag::acdb : tag::acdeb;
  return dnnl::memory::desc(Dims(dims), type, t);
}

// Whether `desc` is the channels-last layout of `dims` with elements channels_last.h's
// transposes move.
bool IsMovableChannelsLast(const dnnl::memory::desc& desc, const std::vector<int64_t>& dims,
                           dt type) {
  return dims.size() >= 3 && dims.size() <= 5 &&
         ChannelsLastMoves(static_cast<int64_t>(dnnl::memory::data_type_size(type))) &&
         desc == ChannelsLastDesc(dims, type);
}

// [N, C, *spatial] as (batch, channels, pixels).
struct ImageSize {
  int64_t batch = 1, channels = 1, pixels = 1;
};
ImageSize SizeOf(const std::vector<int64_t>& dims) {
  ImageSize s;
  s.batch = dims[0];
  s.channels = dims[1];
  for (size_t i = 2; i < dims.size(); ++i) s.pixels *= dims[i];
  return s;
}

// Attributes of a cached plan's reorders: like its convolution, each execution brings its
// own scratchpad (ExecuteWithScratchpad), so one reorder runs on several threads at once.
dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Executes a primitive made with a user scratchpad, giving this execution its own.
void ExecuteWithScratchpad(const dnnl::primitive& primitive,
                           const dnnl::memory::desc& scratchpad, dnnl::stream& stream,
                           std::unordered_map<int, dnnl::memory> args) {
  if (scratchpad.get_size() > 0) {
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(scratchpad, CpuEngine());
  }
  primitive.execute(stream, args);
}

// The layouts tried for a float convolution's source and destination, best first.
// Channel-blocked activations (what PyTorch's ideep asks for) where the ISA has a jit
// kernel for them: their reorders from and to NCHW are cheap blocked copies, whereas the
// channels-last layout oneDNN 2.6 picks by itself on AVX-512 (brgconv) needs a full
// transpose each way on every call, which costs as much as a depthwise convolution.
// The plain source covers a first layer of few channels (3: RGB), whose blocked copy
// would be padded to 16. Last, oneDNN's own choice ("any"), which always exists.
std::vector<std::pair<tag, tag>> FloatConvLayoutCandidates(size_t rank) {
  const tag b16 = ChannelBlockedTag(rank, 16), b8 = ChannelBlockedTag(rank, 8);
  const tag plain = PlainTag(rank);
  return {{b16, b16}, {plain, b16}, {b8, b8}, {plain, b8}, {tag::any, tag::any}};
}


// The source zero point travels as a run-time argument (DNNL_RUNTIME_S32_VAL in the
// attribute), so one primitive serves every zero point.
void AddSourceZeroPoint(dt src_type, dnnl::primitive_attr& attr) {
  if (IsInt8(src_type)) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
}

// Output scales per channel (dst dim 1 for both conv [N, O, ...] and matmul [M, N]),
// relu as an eltwise post-op, the destination zero point (a run-time argument). oneDNN
// 2.6's convolutions take no run-time output scales, so the scale values are part of the
// attribute and hence of the primitive cache's key. oneDNN applies them in this order:
// scale, post-ops, zero point, round, saturate.
void AddInt8Output(const Int8Output* output, int64_t channels, dnnl::primitive_attr& attr) {
  if (output == nullptr) return;
  attr.set_output_scales(1 << 1, std::vector<float>(output->scales, output->scales + channels));
  attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  if (output->relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
}

// The run-time arguments of the attributes above. `zero_points` keeps the two int32
// values alive until execution.
void AddRuntimeArgs(dt src_type, int32_t src_zero_point, const Int8Output* output,
                    int32_t (&zero_points)[2],
                    std::unordered_map<int, dnnl::memory>& args) {
  zero_points[0] = src_zero_point;
  if (IsInt8(src_type)) {
    args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = PlainMemory({1}, dt::s32, &zero_points[0]);
  }
  if (output == nullptr) return;
  zero_points[1] = output->zero_point;
  args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = PlainMemory({1}, dt::s32, &zero_points[1]);
}

// Reordered weights by (source data, target layout); see "Weight reuse" in the header.
class WeightCache {
 public:
  static WeightCache& Get() {
    static WeightCache* const cache = new WeightCache();
    return *cache;
  }

  // The reordered weights of `owner`'s data in layout `desc`: the cached ones, else
  // made by `reorder` and cached. Made once: a thread asking while another makes the same
  // entry waits for it (samples calibrated at once reach the same weights together).
  dnnl::memory FindOrMake(const Tensor& owner, const dnnl::memory::desc& desc,
                          const std::function<dnnl::memory()>& reorder) {
    const void* data = owner.raw_data();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      auto it = entries_.find(data);
      if (it != entries_.end()) {
        for (const Entry& e : it->second) {
          if (e.desc == desc) return e.memory;
        }
      }
      if (!Making(data, desc)) break;
      made_.wait(lock);
    }
    making_.emplace_back(data, desc);
    lock.unlock();
    dnnl::memory reordered;
    try {
      reordered = reorder();
    } catch (...) {
      lock.lock();
      DoneMaking(data, desc);
      throw;
    }
    lock.lock();
    DoneMaking(data, desc);
    Insert(owner, desc, reordered);
    return reordered;
  }

  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  bool Making(const void* data, const dnnl::memory::desc& desc) const {
    for (const auto& [d, m] : making_) {
      if (d == data && m == desc) return true;
    }
    return false;
  }
  void DoneMaking(const void* data, const dnnl::memory::desc& desc) {
    for (size_t i = 0; i < making_.size(); ++i) {
      if (making_[i].first == data && making_[i].second == desc) {
        making_.erase(making_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    made_.notify_all();
  }

  // Called with mu_ held.
  void Insert(const Tensor& owner, const dnnl::memory::desc& desc, dnnl::memory reordered) {
    const size_t bytes = desc.get_size();
    if (bytes > kMaxCachedWeightBytes) return;
    if (bytes_ + bytes > kMaxCachedWeightBytes) {
      entries_.clear();
      bytes_ = 0;
      count_ = 0;
    }
    std::vector<Entry>& list = entries_[owner.raw_data()];
    for (const Entry& e : list) {
      if (e.desc == desc) return;  // another thread got there first
    }
    list.push_back(Entry{owner, desc, std::move(reordered)});
    bytes_ += bytes;
    ++count_;
  }

  struct Entry {
    Tensor owner;  // keeps the source buffer (and so its address) alive
    dnnl::memory::desc desc;
    dnnl::memory memory;
  };
  std::mutex mu_;
  std::condition_variable made_;
  std::vector<std::pair<const void*, dnnl::memory::desc>> making_;  // reorders under way
  std::unordered_map<const void*, std::vector<Entry>> entries_;
  size_t bytes_ = 0;
  size_t count_ = 0;
};

// Weights in the primitive's layout `desc`: from the cache when `owner` is the tensor
// whose bytes `plain` holds and it owns them, else reordered now. Borrowed bytes (a torch
// module's weight handed in by the Python bridge) can be written by their owner without
// copy-on-write, so a reordered copy of them could go stale.
dnnl::memory CachedWeights(const dnnl::memory& plain, const Tensor* owner,
                           const dnnl::memory::desc& desc, dnnl::stream& stream) {
  const void* data = plain.get_data_handle();
  const bool cacheable = owner != nullptr && owner->raw_data() == data &&
                         !owner->borrows_bytes() && plain.get_desc() != desc;
  if (!cacheable) return ToLayout(plain, desc, stream);
  return WeightCache::Get().FindOrMake(*owner, desc, [&] {
    dnnl::memory reordered = ToLayout(plain, desc, stream);
    stream.wait();  // complete before another thread can read it from the cache
    return reordered;
  });
}

// The convolution's weights in the primitive's layout (CachedWeights).
dnnl::memory ConvWeights(const std::vector<int64_t>& wdims, dt weight_type, const ConvBuffers& b,
                         const dnnl::memory::desc& desc, dnnl::stream& stream) {
  return CachedWeights(PlainMemory(wdims, weight_type, b.weights), b.weights_owner, desc,
                       stream);
}

// Grouped weights are [G, O / G, C / G, *K]: the same bytes as PyTorch's [O, C / G, *K].
std::vector<int64_t> OneDnnWeightDims(const ConvGeometry& g) {
  std::vector<int64_t> wdims = g.weights;
  if (g.groups > 1) {
    wdims[0] /= g.groups;
    wdims.insert(wdims.begin(), g.groups);
  }
  return wdims;
}

dnnl::memory::dims DilationGaps(const ConvGeometry& g) {
  dnnl::memory::dims gaps;
  for (int64_t d : g.dilation) gaps.push_back(d - 1);  // oneDNN counts the gaps
  return gaps;
}

// Everything a convolution's plan depends on: geometry, types, bias, for int8 the
// attributes (source zero point present, output scales by value, relu), and the calling
// thread's OpenMP thread count, which a oneDNN primitive fixes its work split (and the
// threads it starts) by when it is created, as oneDNN's own primitive cache keys it; zero
// point values are run-time arguments, not part of a plan.
std::string ConvPlanKey(const ConvGeometry& g, dt src_type, dt weight_type, dt dst_type,
                        bool has_bias, const Int8Output* int8_output) {
  std::string key = absl::StrCat(
      absl::StrJoin(g.src, "x"), "|", absl::StrJoin(g.weights, "x"), "|",
      absl::StrJoin(g.dst, "x"), "|", absl::StrJoin(g.stride, ","), "|",
      absl::StrJoin(g.padding, ","), "|", absl::StrJoin(g.dilation, ","), "|", g.groups, "|",
      static_cast<int>(src_type), ",", static_cast<int>(weight_type), ",",
      static_cast<int>(dst_type), "|", has_bias, "|threads", omp_get_max_threads());
  if (int8_output != nullptr) {
    absl::StrAppend(&key, "|relu", int8_output->relu, "|scales:");
    key.append(reinterpret_cast<const char*>(int8_output->scales),
               sizeof(float) * static_cast<size_t>(g.weights[0]));
  }
  return key;
}

// The first of `candidates` (source, destination layouts) with a jit or brg
// implementation (oneDNN's reference kernels, "ref:", are far slower than any reorder);
// the last candidate is taken whatever it is.
ConvPlan MakeConvPlan(const ConvGeometry& g, dt src_type, dt weight_type, dt dst_type,
                      bool has_bias, const dnnl::primitive_attr& attr,
                      const std::vector<std::pair<tag, tag>>& candidates) {
  const std::vector<int64_t> wdims = OneDnnWeightDims(g);
  const dnnl::memory::desc bias_md = has_bias ? PlainDesc({g.weights[0]}, dt::f32)
                                              : dnnl::memory::desc();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        dnnl::memory::desc(Dims(g.src), src_type, candidates[i].first),
        dnnl::memory::desc(Dims(wdims), weight_type, tag::any), bias_md,
        dnnl::memory::desc(Dims(g.dst), dst_type, candidates[i].second), Dims(g.stride),
        DilationGaps(g), Dims(g.padding), Dims(g.padding));
    const bool last = i + 1 == candidates.size();
    dnnl::convolution_forward::primitive_desc pd;
    try {
      pd = dnnl::convolution_forward::primitive_desc(desc, attr, CpuEngine());
    } catch (const dnnl::error&) {
      if (last) throw;
      continue;  // no implementation for this layout
    }
    if (!last && absl::StartsWith(pd.impl_info_str(), "ref")) continue;
    ConvPlan plan;
    plan.pd = pd;
    plan.primitive = dnnl::convolution_forward(pd);
    plan.src_plain = PlainDesc(g.src, src_type);
    plan.dst_plain = PlainDesc(g.dst, dst_type);
    plan.src_channels_last = IsMovableChannelsLast(pd.src_desc(), g.src, src_type);
    plan.dst_channels_last = IsMovableChannelsLast(pd.dst_desc(), g.dst, dst_type);
    if (pd.src_desc() != plan.src_plain) {
      const dnnl::reorder::primitive_desc reorder_pd(CpuEngine(), plan.src_plain, CpuEngine(),
                                                     pd.src_desc(), UserScratchpad());
      plan.src_reorder = dnnl::reorder(reorder_pd);
      plan.src_reorder_scratchpad = reorder_pd.scratchpad_desc();
    }
    if (pd.dst_desc() != plan.dst_plain) {
      const dnnl::reorder::primitive_desc reorder_pd(CpuEngine(), pd.dst_desc(), CpuEngine(),
                                                     plan.dst_plain, UserScratchpad());
      plan.dst_reorder = dnnl::reorder(reorder_pd);
      plan.dst_reorder_scratchpad = reorder_pd.scratchpad_desc();
    }
    return plan;
  }
  throw dnnl::error(dnnl_unimplemented, "no convolution candidates");
}

// Plans (ConvPlan, MatMulPlan) by key; process-wide, thread-safe (a plan's primitives
// may run on several threads at once: oneDNN's CPU primitives keep no state between
// executions, and each execution brings its own scratchpad), bounded (past kMaxPlans it
// starts over).
template <typename Plan>
class PlanCache {
 public:
  static constexpr size_t kMaxPlans = 4096;

  static PlanCache& Get() {
    static PlanCache* const cache = new PlanCache();
    return *cache;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return plans_.size();
  }

  // The plan of `key`, made by `make` if there is none yet. Made once, outside the lock
  // (it can take milliseconds): a thread asking for a key another thread is making waits
  // for that plan (samples calibrated at once reach the same layers together). If `make`
  // throws, the waiting threads try for themselves.
  std::shared_ptr<const Plan> Find(const std::string& key, const std::function<Plan()>& make) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      auto it = plans_.find(key);
      if (it != plans_.end()) return it->second;
      if (making_.count(key) == 0) break;
      made_.wait(lock);
    }
    making_.insert(key);
    lock.unlock();
    std::shared_ptr<const Plan> plan;
    try {
      plan = std::make_shared<const Plan>(make());
    } catch (...) {
      lock.lock();
      making_.erase(key);
      made_.notify_all();
      throw;
    }
    lock.lock();
    making_.erase(key);
    made_.notify_all();
    if (plans_.size() >= kMaxPlans) plans_.clear();
    return plans_.emplace(key, std::move(plan)).first->second;
  }

 private:
  std::mutex mu_;
  std::condition_variable made_;
  std::unordered_set<std::string> making_;  // keys whose plan is being made
  std::unordered_map<std::string, std::shared_ptr<const Plan>> plans_;
};

using ConvPlanCache = PlanCache<ConvPlan>;

// A matmul's primitive, built once per MatMulPlanKey: creating the primitive descriptor
// (choosing the implementation) costs more than a small matmul itself.
struct MatMulPlan {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
};

using MatMulPlanCache = PlanCache<MatMulPlan>;

// Everything a matmul's primitive depends on: sizes, types, bias, the int8 attributes
// (source zero point present, output scales by value, relu), the weight's layout (plain,
// or the primitive's choice when `packed`) and the calling thread's OpenMP thread count.
std::string MatMulPlanKey(int64_t m, int64_t k, int64_t n, dt src_type, dt weight_type,
                          dt dst_type, bool has_bias, const Int8Output* int8_output,
                          bool packed) {
  std::string key = absl::StrCat(m, "x", k, "x", n, "|", static_cast<int>(src_type), ",",
                                 static_cast<int>(weight_type), ",",
                                 static_cast<int>(dst_type), "|", has_bias, "|packed", packed,
                                 "|threads", omp_get_max_threads());
  if (int8_output != nullptr) {
    absl::StrAppend(&key, "|relu", int8_output->relu, "|scales:");
    key.append(reinterpret_cast<const char*>(int8_output->scales),
               sizeof(float) * static_cast<size_t>(n));
  }
  return key;
}

MatMulPlan MakeMatMulPlan(int64_t m, int64_t k, int64_t n, dt src_type, dt weight_type,
                          dt dst_type, bool has_bias, const Int8Output* int8_output,
                          bool packed) {
  const dnnl::memory::desc src_md = PlainDesc({m, k}, src_type);
  // [K, N] viewed over the [N, K] row-major weight: column-major ("ba"); or, packed, the
  // layout the primitive prefers (the weight is then reordered once and cached).
  const dnnl::memory::desc weight_md({k, n}, weight_type, packed ? tag::any : tag::ba);
  const dnnl::memory::desc bias_md = has_bias ? PlainDesc({1, n}, dt::f32)
                                              : dnnl::memory::desc();
  const dnnl::memory::desc dst_md = PlainDesc({m, n}, dst_type);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  AddSourceZeroPoint(src_type, attr);
  AddInt8Output(int8_output, n, attr);
  MatMulPlan plan;
  plan.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, weight_md, bias_md, dst_md),
                                         attr, CpuEngine());
  plan.primitive = dnnl::matmul(plan.pd);
  return plan;
}

// Runs `plan` over the caller's plain buffers, reordering the source in and the
// destination out where the plan's layouts differ; `extra` adds run-time arguments.
void ExecuteConvPlan(const ConvPlan& plan, const ConvGeometry& g, dt src_type,
                     dt weight_type, dt dst_type, const ConvBuffers& b, dnnl::stream& stream,
                     std::unordered_map<int, dnnl::memory> extra) {
  dnnl::memory user_src = PlainMemory(g.src, src_type, b.src);
  dnnl::memory user_dst = PlainMemory(g.dst, dst_type, b.dst);
  dnnl::memory src = user_src, dst = user_dst;
  if (b.src_channels_last) {
    // Taken as it is when the primitive computes channels-last (int8 on x86), else
    // reordered to its layout (not cached: no kernel of fuselage's hands over this case).
    dnnl::memory given(ChannelsLastDesc(g.src, src_type), CpuEngine(),
                             const_cast<void*>(b.src));
    if (given.get_desc() == plan.pd.src_desc()) {
      src = given;
    } else {
      src = dnnl::memory(plan.pd.src_desc(), CpuEngine());
      dnnl::reorder(given, src).execute(stream, given, src);
    }
  } else if (plan.src_reorder) {
    src = dnnl::memory(plan.pd.src_desc(), CpuEngine());
    if (plan.src_channels_last) {
      const ImageSize s = SizeOf(g.src);
      ToChannelsLast(b.src, static_cast<int64_t>(dnnl::memory::data_type_size(src_type)),
                     s.batch, s.channels, s.pixels, src.get_data_handle());
    } else {
      ExecuteWithScratchpad(plan.src_reorder, plan.src_reorder_scratchpad, stream,
                            {{DNNL_ARG_FROM, user_src}, {DNNL_ARG_TO, src}});
    }
  }
  const bool dst_channels_last = b.dst_channels_last != nullptr && plan.dst_channels_last;
  if (b.dst_channels_last != nullptr) *b.dst_channels_last = dst_channels_last;
  if (dst_channels_last) {
    dst = dnnl::memory(plan.pd.dst_desc(), CpuEngine(), b.dst);
  } else if (plan.dst_reorder) {
    dst = dnnl::memory(plan.pd.dst_desc(), CpuEngine());
  }
  dnnl::memory weights =
      ConvWeights(OneDnnWeightDims(g), weight_type, b, plan.pd.weights_desc(), stream);
  std::unordered_map<int, dnnl::memory> args = std::move(extra);
  args[DNNL_ARG_SRC] = src;
  args[DNNL_ARG_WEIGHTS] = weights;
  args[DNNL_ARG_DST] = dst;
  if (b.bias) args[DNNL_ARG_BIAS] = PlainMemory({g.weights[0]}, dt::f32, b.bias);
  ExecuteWithScratchpad(plan.primitive, plan.pd.scratchpad_desc(), stream, std::move(args));
  if (dst_channels_last) return;  // the caller's buffer holds the result as it is
  if (plan.dst_reorder && plan.dst_channels_last) {
    stream.wait();  // the convolution's output complete before it is read here
    const ImageSize s = SizeOf(g.dst);
    FromChannelsLast(dst.get_data_handle(),
                     static_cast<int64_t>(dnnl::memory::data_type_size(dst_type)), s.batch,
                     s.channels, s.pixels, b.dst);
  } else if (plan.dst_reorder) {
    ExecuteWithScratchpad(plan.dst_reorder, plan.dst_reorder_scratchpad, stream,
                          {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, user_dst}});
  }
}

}  // namespace

size_t CachedWeightCount() { return WeightCache::Get().count(); }

size_t CachedConvPlanCount() { return ConvPlanCache::Get().size(); }

size_t CachedMatMulPlanCount() { return MatMulPlanCache::Get().size(); }

const dnnl::engine& CpuEngine() {
  static const dnnl::engine* const engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

absl::Status Run(absl::string_view op, const std::function<void(dnnl::stream&)>& body) {
  try {
    dnnl::stream stream(CpuEngine());
    body(stream);
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat(op, ": oneDNN failed: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(op, ": out of memory in oneDNN"));
  }
  return absl::OkStatus();
}

dnnl::memory::desc PlainDesc(const std::vector<int64_t>& dims, dt type) {
  return dnnl::memory::desc(Dims(dims), type, PlainTag(dims.size()));
}

dnnl::memory PlainMemory(const std::vector<int64_t>& dims, dt type, const void* data) {
  // oneDNN takes a mutable handle but only writes through it for outputs.
  return dnnl::memory(PlainDesc(dims, type), CpuEngine(), const_cast<void*>(data));
}

dnnl::memory ToLayout(const dnnl::memory& m, const dnnl::memory::desc& desc,
                      dnnl::stream& stream) {
  if (m.get_desc() == desc) return m;
  dnnl::memory out(desc, CpuEngine());
  dnnl::reorder(m, out).execute(stream, const_cast<dnnl::memory&>(m), out);
  return out;
}

absl::Status Convolution(absl::string_view op, const ConvGeometry& g, dt src_type,
                         dt weight_type, dt dst_type, const ConvBuffers& b,
                         int32_t src_zero_point, const Int8Output* int8_output) {
  return Run(op, [&](dnnl::stream& stream) {
    const bool is_float = src_type == dt::f32 && weight_type == dt::f32 &&
                          dst_type == dt::f32 && int8_output == nullptr;
    const bool has_bias = b.bias != nullptr;
    const std::shared_ptr<const ConvPlan> plan = ConvPlanCache::Get().Find(
        ConvPlanKey(g, src_type, weight_type, dst_type, has_bias, int8_output), [&] {
          dnnl::primitive_attr attr;
          // A cached primitive runs on several threads at once: each execution brings its
          // own scratchpad (ExecuteConvPlan), where the library's would be shared.
          attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
          AddSourceZeroPoint(src_type, attr);
          AddInt8Output(int8_output, g.weights[0], attr);
          // int8 keeps oneDNN's own layout choice (its kernels, hence its bytes, as before
          // plans were cached); float prefers the channel-blocked layouts.
          return MakeConvPlan(g, src_type, weight_type, dst_type, has_bias, attr,
                              is_float ? FloatConvLayoutCandidates(g.src.size())
                                       : std::vector<std::pair<tag, tag>>{{tag::any, tag::any}});
        });
    std::unordered_map<int, dnnl::memory> runtime_args;
    int32_t zero_points[2];
    AddRuntimeArgs(src_type, src_zero_point, int8_output, zero_points, runtime_args);
    ExecuteConvPlan(*plan, g, src_type, weight_type, dst_type, b, stream,
                    std::move(runtime_args));
  });
}

absl::Status Deconvolution(absl::string_view op, const ConvGeometry& g, dt src_type,
                           dt weight_type, dt dst_type, const ConvBuffers& b) {
  return Run(op, [&](dnnl::stream& stream) {
    dnnl::memory::dims strides = Dims(g.stride), dilates;
    const dnnl::memory::dims zeros(g.stride.size(), 0);
    for (int64_t d : g.dilation) dilates.push_back(d - 1);
    std::vector<int64_t> wdims = g.weights;
    if (g.groups > 1) {
      wdims[0] /= g.groups;
      wdims.insert(wdims.begin(), g.groups);
    }
    const auto any = [](const std::vector<int64_t>& d, dt t) {
      return dnnl::memory::desc(Dims(d), t, tag::any);
    };
    const dnnl::memory::desc bias_md =
        b.bias ? PlainDesc({g.weights[0]}, dt::f32) : dnnl::memory::desc();
    const dnnl::deconvolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
        any(g.src, src_type), any(wdims, weight_type), bias_md, any(g.dst, dst_type), strides,
        dilates, zeros, zeros);
    const dnnl::deconvolution_forward::primitive_desc pd(desc, CpuEngine());
    dnnl::memory src = ToLayout(PlainMemory(g.src, src_type, b.src), pd.src_desc(), stream);
    dnnl::memory weights =
        ToLayout(PlainMemory(wdims, weight_type, b.weights), pd.weights_desc(), stream);
    dnnl::memory user_dst = PlainMemory(g.dst, dst_type, b.dst);
    const bool dst_plain = pd.dst_desc() == user_dst.get_desc();
    dnnl::memory dst = dst_plain ? user_dst : dnnl::memory(pd.dst_desc(), CpuEngine());
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    if (b.bias) args[DNNL_ARG_BIAS] = PlainMemory({g.weights[0]}, dt::f32, b.bias);
    dnnl::deconvolution_forward(pd).execute(stream, args);
    if (!dst_plain) dnnl::reorder(dst, user_dst).execute(stream, dst, user_dst);
  });
}

absl::Status MatMul(absl::string_view op, int64_t m, int64_t k, int64_t n, dt src_type,
                    dt weight_type, dt dst_type, const void* src, const void* weights,
                    const float* bias, void* dst, int32_t src_zero_point,
                    const Int8Output* int8_output, const Tensor* weights_owner) {
  return Run(op, [&](dnnl::stream& stream) {
    // The weight in the primitive's own layout only when its reordered form can be kept
    // (as for convolutions); else the plain [N, K] buffer itself, not reordered per call.
    const bool packed = weights_owner != nullptr && weights_owner->raw_data() == weights &&
                        !weights_owner->borrows_bytes();
    const std::shared_ptr<const MatMulPlan> plan = MatMulPlanCache::Get().Find(
        MatMulPlanKey(m, k, n, src_type, weight_type, dst_type, bias != nullptr, int8_output,
                      packed),
        [&] {
          return MakeMatMulPlan(m, k, n, src_type, weight_type, dst_type, bias != nullptr,
                                int8_output, packed);
        });
    const dnnl::memory::desc weight_plain({k, n}, weight_type, tag::ba);
    dnnl::memory weight_memory;
    if (packed && plan->pd.weights_desc() != weight_plain) {
      weight_memory = CachedWeights(
          dnnl::memory(weight_plain, CpuEngine(), const_cast<void*>(weights)), weights_owner,
          plan->pd.weights_desc(), stream);
    } else {
      weight_memory = dnnl::memory(weight_plain, CpuEngine(), const_cast<void*>(weights));
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(plan->pd.src_desc(), CpuEngine(), const_cast<void*>(src))},
        {DNNL_ARG_WEIGHTS, weight_memory},
        {DNNL_ARG_DST, dnnl::memory(plan->pd.dst_desc(), CpuEngine(), dst)}};
    if (bias) {
      args[DNNL_ARG_BIAS] = PlainMemory({1, n}, dt::f32, bias);
    }
    int32_t zero_points[2];
    AddRuntimeArgs(src_type, src_zero_point, int8_output, zero_points, args);
    ExecuteWithScratchpad(plan->primitive, plan->pd.scratchpad_desc(), stream, std::move(args));
  });
}

absl::Status BatchedMatMul(absl::string_view op, int64_t batch, int64_t m, int64_t k,
                           int64_t n, const float* a, const float* b, float* dst) {
  return Run(op, [&](dnnl::stream& stream) {
    const std::shared_ptr<const MatMulPlan> plan = MatMulPlanCache::Get().Find(
        absl::StrCat("batched|", batch, "x", m, "x", k, "x", n, "|threads",
                     omp_get_max_threads()),
        [&] {
          dnnl::primitive_attr attr;
          attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
          MatMulPlan plan;
          plan.pd = dnnl::matmul::primitive_desc(
              dnnl::matmul::desc(PlainDesc({batch, m, k}, dt::f32),
                                 PlainDesc({batch, k, n}, dt::f32),
                                 PlainDesc({batch, m, n}, dt::f32)),
              attr, CpuEngine());
          plan.primitive = dnnl::matmul(plan.pd);
          return plan;
        });
    ExecuteWithScratchpad(
        plan->primitive, plan->pd.scratchpad_desc(), stream,
        {{DNNL_ARG_SRC, dnnl::memory(plan->pd.src_desc(), CpuEngine(), const_cast<float*>(a))},
         {DNNL_ARG_WEIGHTS,
          dnnl::memory(plan->pd.weights_desc(), CpuEngine(), const_cast<float*>(b))},
         {DNNL_ARG_DST, dnnl::memory(plan->pd.dst_desc(), CpuEngine(), dst)}});
  });
}

}  // namespace onednn
}  // namespace fuselage
