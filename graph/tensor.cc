#include "graph/tensor.h"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <ostream>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "graph/check.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fuselage {

QuantParams QuantParams::PerTensor(double scale, int64_t zero_point) {
  QuantParams q;
  q.scheme = QScheme::kPerTensorAffine;
  q.scales = {scale};
  q.zero_points = {zero_point};
  return q;
}

QuantParams QuantParams::PerChannel(std::vector<double> scales,
                                    std::vector<int64_t> zero_points, int64_t axis) {
  QuantParams q;
  q.scheme = QScheme::kPerChannelAffine;
  q.scales = std::move(scales);
  q.zero_points = std::move(zero_points);
  q.axis = axis;
  return q;
}

bool operator==(const QuantParams& a, const QuantParams& b) {
  return a.scheme == b.scheme && a.scales == b.scales && a.zero_points == b.zero_points &&
         (a.scheme != QScheme::kPerChannelAffine || a.axis == b.axis);
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) {
  return os << "[" << absl::StrJoin(shape, ", ") << "]";
}

namespace tensor_internal {

// Mappings for tensor buffers (see TensorBuffer). Without Linux's mmap every allocation
// here fails, and buffers are heap blocks as before.
constexpr size_t kHugePage = TensorBuffer::kHugePageBytes;  // the alignment THP needs

// `length` bytes (a page multiple) mapped at a 2 MiB boundary, so that a kernel whose
// transparent-huge-page policy is "always" can back them with huge pages; nullptr if the
// kernel refuses. No MADV_HUGEPAGE: measured on this project's VM (Firecracker, THP
// "madvise"), a fresh huge page costs far more than the small pages it replaces (the
// fused weights of resnet50: 0.37-0.78 s of system time with the advice, 0.20-0.22 s
// without), and buffers a run uses again come back from the caches below, faulted in.
char* MapHugePageAligned(size_t length) {
#if defined(__linux__)
  // Reserve one huge page more than needed, then unmap the head before the first 2 MiB
  // boundary and the tail after `length`.
  const size_t reserved = length + kHugePage;
  void* const start =
      mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (start == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(start);
  const uintptr_t aligned = (begin + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  if (aligned != begin) munmap(start, aligned - begin);
  const size_t tail = begin + reserved - (aligned + length);
  if (tail != 0) munmap(reinterpret_cast<void*>(aligned + length), tail);
  return reinterpret_cast<char*>(aligned);
#else
  (void)length;
  return nullptr;
#endif
}

// Faults in the `length` bytes at `data` in one call (Linux 5.14's MADV_POPULATE_WRITE; on an
// older kernel the call fails and the pages fault in as they are written). A buffer of
// its own is written whole right away (the tensor's every element), and populating it
// costs less than the page faults it replaces: resnet50's folded conv weights (94 MB) took
// 0.032-0.044 s instead of 0.057 s on this project's VM. The shared regions below stay
// faulted in as they are carved.
void PopulateForWriting(char* data, size_t length) {
#if defined(__linux__)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // linux/mman.h since 5.14; glibc's headers may lack it
#endif
  (void)madvise(data, length, MADV_POPULATE_WRITE);
#else
  (void)data;
  (void)length;
#endif
}

void Unmap(char* data, size_t length) {
#if defined(__linux__)
  munmap(data, length);
#else
  (void)data;
  (void)length;
#endif
}

size_t PageSize() {
#if defined(__linux__)
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
#else
  return 4096;
#endif
}

// A region medium buffers are carved from, front to back; freed when its last buffer is
// (or reused from its start if it is still the one being carved).
struct Region {
  static constexpr size_t kBytes = size_t{16} << 20;  // 8 huge pages' worth
  char* base;
  size_t used = 0;  // bytes carved so far
  size_t live = 0;  // buffers not yet freed
};

// The process's regions: the one being carved and up to kMaxSpares empty ones. Regions that
// are full stay mapped only while one of their buffers lives. Pages a region has not
// touched cost no memory, so a region's tail past its last buffer is free.
class RegionPool {
 public:
  static RegionPool& Get() {
    static RegionPool* const pool = new RegionPool();  // never destroyed: buffers may
    return *pool;                                       // outlive static destructors
  }

  // `size` bytes in a region (aligned to a cache line), or nullptr if none can be mapped.
  char* Allocate(size_t size, Region** region) {
    constexpr size_t kAlign = 64;
    const size_t need = (size + kAlign - 1) / kAlign * kAlign;
    std::lock_guard<std::mutex> lock(mu_);
    if (current_ == nullptr || current_->used + need > Region::kBytes) {
      Region* next = nullptr;
      if (!spares_.empty()) {
        next = spares_.back();
        spares_.pop_back();
      } else {
        char* base = MapHugePageAligned(Region::kBytes);
        if (base == nullptr) return nullptr;
        next = new Region{base};
      }
      // The retired region goes when its last buffer does (Free); one without buffers
      // becomes a spare now.
      if (current_ != nullptr && current_->live == 0) Release(current_);
      current_ = next;
    }
    char* data = current_->base + current_->used;
    current_->used += need;
    ++current_->live;
    *region = current_;
    return data;
  }

  void Free(Region* region) {
    std::lock_guard<std::mutex> lock(mu_);
    if (--region->live != 0) return;
    if (region == current_) {
      region->used = 0;  // carve again from its start: those pages are already there
    } else {
      Release(region);
    }
  }

 private:
  // An empty region that is not current: kept as a spare, or unmapped.
  void Release(Region* region) {
    if (spares_.size() < kMaxSpares) {
      region->used = 0;
      spares_.push_back(region);
      return;
    }
    Unmap(region->base, Region::kBytes);
    delete region;
  }

  // Empty regions kept for reuse: a pass run again and again (a server, a benchmark)
  // carves its buffers from pages already faulted in, as the heap would give it blocks
  // it freed, instead of mapping and faulting new ones each time.
  static constexpr size_t kMaxSpares = 8;  // 128 MiB of address space at most
  std::mutex mu_;
  Region* current_ = nullptr;
  std::vector<Region*> spares_;
};

// Large buffers' mappings freed lately, kept for reuse (same reason as the spare
// regions): up to kMaxBytes in all; a mapping is reused for a buffer that needs its
// length or up to an eighth less.
class MappingCache {
 public:
  static MappingCache& Get() {
    static MappingCache* const cache = new MappingCache();  // never destroyed
    return *cache;
  }
  // A cached mapping for `length` bytes (its own length into *mapped_length), or nullptr.
  char* Take(size_t length, size_t* mapped_length) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < mappings_.size(); ++i) {
      const Mapping m = mappings_[i];
      if (m.length >= length && m.length - length <= m.length / 8) {
        mappings_[i] = mappings_.back();
        mappings_.pop_back();
        bytes_ -= m.length;
        *mapped_length = m.length;
        return m.data;
      }
    }
    return nullptr;
  }
  // Keeps the mapping for reuse, or unmaps it when the cache is full.
  void Give(char* data, size_t length) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (bytes_ + length <= kMaxBytes && mappings_.size() < kMaxMappings) {
        mappings_.push_back({data, length});
        bytes_ += length;
        return;
      }
    }
    Unmap(data, length);
  }

 private:
  static constexpr size_t kMaxBytes = size_t{256} << 20;
  static constexpr size_t kMaxMappings = 64;
  struct Mapping {
    char* data;
    size_t length;
  };
  std::mutex mu_;
  std::vector<Mapping> mappings_;
  size_t bytes_ = 0;
};

// Whether medium buffers come from regions: not under AddressSanitizer, which only
// catches an overflow into a neighbour when every buffer is a heap block of its own.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPoolMediumBuffers = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kPoolMediumBuffers = false;
#else
constexpr bool kPoolMediumBuffers = true;
#endif
#else
constexpr bool kPoolMediumBuffers = true;
#endif

}  // namespace tensor_internal

TensorBuffer* TensorBuffer::NewExternal(size_t size, Storage storage, char* data) {
  void* block = ::operator new(sizeof(TensorBuffer) + sizeof(External));
  TensorBuffer* buffer = new (block) TensorBuffer(size, storage);
  new (buffer->external()) External{data, 0, nullptr, std::string(), nullptr};
  return buffer;
}

TensorBuffer* TensorBuffer::Allocate(size_t size) {
  static_assert(sizeof(TensorBuffer) % alignof(std::max_align_t) == 0,
                "the data after the header must stay aligned for any element type");
  static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= alignof(std::max_align_t),
                "operator new must return blocks aligned for any element type");
  using namespace tensor_internal;  // NOLINT(build/namespaces): this file's own helpers
  if (size >= kHugePageBytes) {
    size_t length = (size + PageSize() - 1) / PageSize() * PageSize();
    char* data = MappingCache::Get().Take(length, &length);
    if (data == nullptr) {
      data = MapHugePageAligned(length);
      if (data != nullptr) PopulateForWriting(data, length);
    }
    if (data != nullptr) {
      TensorBuffer* buffer = NewExternal(size, Storage::kMapped, data);
      buffer->external()->mapped_length = length;
      return buffer;
    }
  } else if (size >= kPooledMinBytes && kPoolMediumBuffers) {
    Region* region = nullptr;
    if (char* data = RegionPool::Get().Allocate(size, &region)) {
      TensorBuffer* buffer = NewExternal(size, Storage::kPooled, data);
      buffer->external()->region = region;
      return buffer;
    }
  }
  void* block = ::operator new(sizeof(TensorBuffer) + size);
  return new (block) TensorBuffer(size, Storage::kInline);
}

TensorBuffer* TensorBuffer::Copy(absl::string_view bytes) {
  TensorBuffer* buffer = Allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(buffer->data(), bytes.data(), bytes.size());
  return buffer;
}

TensorBuffer* TensorBuffer::Adopt(std::string bytes) {
  // A string's own inline storage (short strings) moves with the string object, a block
  // that is not aligned for every element type cannot be the data, and a block much
  // larger than its bytes is not kept for them: copy those.
  const bool on_heap = bytes.capacity() > std::string().capacity();
  const bool snug = bytes.capacity() - bytes.size() <= bytes.size() / 4;
  const bool aligned =
      reinterpret_cast<uintptr_t>(bytes.data()) % alignof(std::max_align_t) == 0;
  if (bytes.empty() || !on_heap || !snug || !aligned) return Copy(bytes);
  TensorBuffer* buffer = NewExternal(bytes.size(), Storage::kString, nullptr);
  External* external = buffer->external();
  external->owner = std::move(bytes);
  external->data = external->owner.data();  // the moved string keeps its heap block
  return buffer;
}

TensorBuffer* TensorBuffer::Borrow(const void* data, size_t size,
                                   std::shared_ptr<const void> owner) {
  const bool aligned = reinterpret_cast<uintptr_t>(data) % alignof(std::max_align_t) == 0;
  if (size == 0 || !aligned) return Copy(absl::string_view(static_cast<const char*>(data), size));
  // The bytes are never written through this buffer (shared() is true for it), so the
  // const_cast only gives them the type data() returns.
  TensorBuffer* buffer =
      NewExternal(size, Storage::kBorrowed, const_cast<char*>(static_cast<const char*>(data)));
  buffer->external()->borrowed_from = std::move(owner);
  return buffer;
}

void TensorBuffer::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (storage_ != Storage::kInline) {
    External* external = this->external();
    if (storage_ == Storage::kMapped) {
      tensor_internal::MappingCache::Get().Give(external->data, external->mapped_length);
    } else if (storage_ == Storage::kPooled) {
      tensor_internal::RegionPool::Get().Free(external->region);
    }
    external->~External();
  }
  this->~TensorBuffer();
  ::operator delete(static_cast<void*>(this));
}

absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape) {
  bool has_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape dimension ", i, " is ", shape[i], "; expected >= 0"));
    }
    has_zero |= shape[i] == 0;
  }
  if (has_zero) {
    // No elements, but each dimension is still bounded: kernels add and multiply
    // dimensions with each other and with window parameters, which cannot overflow int64
    // while all of them are at most 2^28. (Without a 0, the count bounds each dimension.)
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] > Tensor::kMaxElements) {
        return absl::InvalidArgumentError(absl::StrCat(
            "shape dimension ", i, " is ", shape[i], "; the limit is ", Tensor::kMaxElements));
      }
    }
    return 0;
  }
  int64_t numel = 1;
  for (const int64_t d : shape) {
    if (numel > Tensor::kMaxElements / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape [", absl::StrJoin(shape, ", "), "] has more than ", Tensor::kMaxElements,
          " elements"));
    }
    numel *= d;
  }
  return numel;
}

absl::StatusOr<Tensor> Tensor::WithoutData(DType dtype, Shape shape, QuantParams qparams) {
  if (DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensors of dtype ", DTypeName(dtype), " are not supported"));
  }
  auto numel = CheckedNumel(shape);
  if (!numel.ok()) return numel.status();
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = *numel;
  t.qparams_ = std::move(qparams);
  return t;
}

absl::Status Tensor::WrongByteCount(size_t actual, const Tensor& t) {
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor data has ", actual, " bytes; expected ", t.numel_ * DTypeSize(t.dtype_),
      " for ", DTypeName(t.dtype_), " shape ", t.ShapeString()));
}

absl::StatusOr<Tensor> Tensor::Uninitialized(DType dtype, Shape shape, QuantParams qparams) {
  auto t = WithoutData(dtype, std::move(shape), std::move(qparams));
  if (!t.ok()) return t.status();
  const size_t nbytes = static_cast<size_t>(t->numel_) * DTypeSize(dtype);
  if (nbytes != 0) t->buffer_ = TensorBuffer::Allocate(nbytes);
  return t;
}

absl::StatusOr<Tensor> Tensor::Zeros(DType dtype, Shape shape, QuantParams qparams) {
  auto t = Uninitialized(dtype, std::move(shape), std::move(qparams));
  if (t.ok() && t->buffer_ != nullptr) std::memset(t->buffer_->data(), 0, t->nbytes());
  return t;
}

absl::StatusOr<Tensor> Tensor::FromBytes(DType dtype, Shape shape, std::string bytes,
                                         QuantParams qparams) {
  auto t = WithoutData(dtype, std::move(shape), std::move(qparams));
  if (!t.ok()) return t.status();
  const size_t expected = static_cast<size_t>(t->numel_) * DTypeSize(dtype);
  if (bytes.size() != expected) return WrongByteCount(bytes.size(), *t);
  if (expected != 0) t->buffer_ = TensorBuffer::Adopt(std::move(bytes));
  return t;
}

absl::StatusOr<Tensor> Tensor::BorrowBytes(DType dtype, Shape shape, absl::string_view bytes,
                                           std::shared_ptr<const void> owner,
                                           QuantParams qparams) {
  auto t = WithoutData(dtype, std::move(shape), std::move(qparams));
  if (!t.ok()) return t.status();
  const size_t expected = static_cast<size_t>(t->numel_) * DTypeSize(dtype);
  if (bytes.size() != expected) return WrongByteCount(bytes.size(), *t);
  if (expected != 0) t->buffer_ = TensorBuffer::Borrow(bytes.data(), bytes.size(), std::move(owner));
  return t;
}

absl::StatusOr<Tensor> Tensor::CopyFromBytes(DType dtype, Shape shape, absl::string_view bytes,
                                             QuantParams qparams) {
  auto t = WithoutData(dtype, std::move(shape), std::move(qparams));
  if (!t.ok()) return t.status();
  const size_t expected = static_cast<size_t>(t->numel_) * DTypeSize(dtype);
  if (bytes.size() != expected) return WrongByteCount(bytes.size(), *t);
  if (expected != 0) t->buffer_ = TensorBuffer::Copy(bytes);
  return t;
}

Tensor Tensor::FromFloats(Shape shape, absl::Span<const float> values) {
  auto t = CopyFromBytes(
      DType::kFloat32, std::move(shape),
      absl::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  FUSELAGE_CHECK(t.ok());
  return *std::move(t);
}

Tensor Tensor::FromInt64s(Shape shape, absl::Span<const int64_t> values) {
  auto t = CopyFromBytes(DType::kInt64, std::move(shape),
                         absl::string_view(reinterpret_cast<const char*>(values.data()),
                                           values.size() * sizeof(int64_t)));
  FUSELAGE_CHECK(t.ok());
  return *std::move(t);
}

const void* Tensor::raw_data() const {
  // What empty tensors point at: aligned like a buffer's data, never written (0 bytes).
  alignas(std::max_align_t) static char empty[alignof(std::max_align_t)] = {};
  return buffer_ != nullptr ? buffer_->data() : empty;
}

void* Tensor::mutable_raw_data() {
  if (buffer_ == nullptr) return const_cast<void*>(raw_data());
  if (buffer_->shared()) {
    TensorBuffer* copy = TensorBuffer::Copy(bytes());
    buffer_->Unref();
    buffer_ = copy;
  }
  return buffer_->data();
}

absl::StatusOr<Tensor> Tensor::Reshaped(Shape shape) const {
  auto numel = CheckedNumel(shape);
  if (!numel.ok()) return numel.status();
  if (*numel != numel_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeString(), " (",
                                                   numel_, " elements) to [",
                                                   absl::StrJoin(shape, ", "), "]"));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

bool operator==(const Tensor& a, const Tensor& b) {
  return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ && a.qparams_ == b.qparams_ &&
         a.bytes() == b.bytes();
}

std::string Tensor::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape_, ", "), "]");
}

}  // namespace fuselage
