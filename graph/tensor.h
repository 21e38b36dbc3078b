// Tensor: a dense, contiguous, row-major buffer with a shape, an element type and, for
// quantized dtypes, per-tensor or per-channel quantization parameters.
//
// Tensors are values. Copies share the immutable byte buffer until one is written
// (mutable_data() detaches), so passing weights around is cheap.
//
// Heap cost (issue 7: the passes create, copy and destroy tensors per node): the shape
// lives inline (Shape, up to Shape::kInlineDims dimensions), the bytes live in one
// refcounted block (TensorBuffer: header, then the data). Creating a tensor allocates
// one block (none when it is empty), copying or reshaping one allocates none.
#ifndef FUSELAGE_GRAPH_TENSOR_H_
#define FUSELAGE_GRAPH_TENSOR_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/dtype.h"

namespace fuselage {

// A short sequence of T stored inline up to N elements (more spill to the heap): what a
// tensor keeps per dimension or per channel, without a heap block in the common case. It
// offers the parts of std::vector<T>'s interface that callers use, converts implicitly
// from a std::vector<T>, a braced list, an absl::Span<const T> or an iterator range, and
// converts implicitly to a std::vector<T> (that conversion allocates: prefer passing it
// as an absl::Span<const T>, which is free).
template <typename T, size_t N>
class InlineVector {
  static_assert(std::is_trivially_copyable<T>::value, "elements are copied as bytes");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;

  InlineVector() {}  // user-provided: `const InlineVector v;` is allowed
  InlineVector(std::initializer_list<T> values) { Assign(values.begin(), values.size()); }
  InlineVector(const std::vector<T>& values) {  // NOLINT(google-explicit-constructor)
    Assign(values.data(), values.size());
  }
  InlineVector(absl::Span<const T> values) {  // NOLINT(google-explicit-constructor)
    Assign(values.data(), values.size());
  }
  template <typename InputIt, typename = decltype(static_cast<T>(*std::declval<InputIt&>()))>
  InlineVector(InputIt first, InputIt last) { assign(first, last); }

  // Copies and moves are what the passes do to tensors per node: kept inline and cheap
  // (a move of inline values is a fixed-size copy, no branch on the element count).
  InlineVector(const InlineVector& other) {
    if (other.on_heap()) {
      Assign(other.heap_, other.size_);
    } else {
      std::memcpy(inline_, other.inline_, sizeof(inline_));
      size_ = other.size_;
    }
  }
  InlineVector(InlineVector&& other) noexcept { StealFrom(other); }
  InlineVector& operator=(const InlineVector& other) {
    if (this != &other) Assign(other.data(), other.size_);
    return *this;
  }
  InlineVector& operator=(InlineVector&& other) noexcept {
    if (this != &other) {
      FreeHeap();
      StealFrom(other);
    }
    return *this;
  }
  ~InlineVector() { FreeHeap(); }

  operator std::vector<T>() const { return {begin(), end()}; }  // NOLINT
  std::vector<T> ToVector() const { return {begin(), end()}; }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T* data() const { return on_heap() ? heap_ : inline_; }
  T* data() { return on_heap() ? heap_ : inline_; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& operator[](size_t i) { return data()[i]; }
  const T& front() const { return data()[0]; }
  const T& back() const { return data()[size_ - 1]; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  void push_back(T value) {
    if (size_ == capacity_) Grow(size_ + 1);
    data()[size_++] = value;
  }
  void resize(size_t n, T value = T()) {
    if (n > capacity_) Grow(n);
    T* values = data();
    for (size_t i = size_; i < n; ++i) values[i] = value;
    size_ = static_cast<uint32_t>(n);
  }
  template <typename InputIt>
  void assign(InputIt first, InputIt last) {
    clear();
    for (; first != last; ++first) push_back(static_cast<T>(*first));
  }
  void clear() { size_ = 0; }

  friend bool operator==(const InlineVector& a, const InlineVector& b) {
    return absl::MakeConstSpan(a.data(), a.size()) == absl::MakeConstSpan(b.data(), b.size());
  }
  friend bool operator!=(const InlineVector& a, const InlineVector& b) { return !(a == b); }
  friend bool operator==(const InlineVector& a, const std::vector<T>& b) {
    return absl::MakeConstSpan(a.data(), a.size()) == absl::MakeConstSpan(b);
  }
  friend bool operator==(const std::vector<T>& a, const InlineVector& b) { return b == a; }
  friend bool operator!=(const InlineVector& a, const std::vector<T>& b) { return !(a == b); }
  friend bool operator!=(const std::vector<T>& a, const InlineVector& b) { return !(b == a); }

 private:
  bool on_heap() const { return capacity_ > N; }
  // Replaces the contents with values[0, n).
  void Assign(const T* values, size_t n) {
    if (n > capacity_) Grow(n);
    if (n != 0) std::memcpy(data(), values, n * sizeof(T));
    size_ = static_cast<uint32_t>(n);
  }
  // Moves the values to a heap array with room for at least min_capacity.
  void Grow(size_t min_capacity) {
    const size_t capacity = std::max<size_t>(min_capacity, 2 * size_t{capacity_});
    T* heap = new T[capacity];
    if (size_ != 0) std::memcpy(heap, data(), size_ * sizeof(T));
    FreeHeap();
    heap_ = heap;
    capacity_ = static_cast<uint32_t>(capacity);
  }
  void FreeHeap() {
    if (on_heap()) delete[] heap_;
  }
  // Takes other's values (its heap array, or a copy of its inline ones); leaves it empty.
  void StealFrom(InlineVector& other) {
    size_ = other.size_;
    capacity_ = other.capacity_;
    if (other.on_heap()) {
      heap_ = other.heap_;
    } else {
      std::memcpy(inline_, other.inline_, sizeof(inline_));
    }
    other.size_ = 0;
    other.capacity_ = N;
  }

  uint32_t size_ = 0;
  uint32_t capacity_ = N;  // N: the values are inline; more: they are in heap_.
  union {
    T inline_[N] = {};
    T* heap_;
  };
};

// The dimensions of a tensor: inline up to kInlineDims (every tensor of a CNN or
// transformer), so a tensor's shape costs no heap block.
class Shape : public InlineVector<int64_t, 6> {
 public:
  static constexpr size_t kInlineDims = 6;
  using InlineVector::InlineVector;
  Shape() {}  // Rank 0 (a scalar's shape).

  // "[1, 3, 224, 224]"; also how gtest prints a Shape.
  friend std::ostream& operator<<(std::ostream& os, const Shape& shape);
  friend void PrintTo(const Shape& shape, std::ostream* os) { *os << shape; }
};

namespace tensor_internal {
struct Region;  // A 2 MiB-aligned region shared by medium buffers (tensor.cc).
}  // namespace tensor_internal

// The bytes of a tensor: one heap block holding this header, then the data, aligned for
// any element type (alignof(std::max_align_t)). Refcounted by the Tensors that share it;
// a Tensor writes to it only when it holds the only reference (copy-on-write).
//
// Some buffers keep their data outside the header's block (the header is then followed
// by where the data is and who owns it):
// - large ones (kHugePageBytes or more) are a memory mapping of their own, 2 MiB-aligned
//   (huge pages where the kernel's policy gives them; fuselage does not ask for them, as a
//   fresh huge page proved dearer than small pages on a VM: tensor.cc); medium ones
//   (kPooledMinBytes up to kHugePageBytes) are carved one after another out of shared
//   regions. A mapping goes back to the kernel when its buffer is freed and a region when
//   its last buffer is, except for a bounded number of each kept for reuse (tensor.cc:
//   MappingCache, RegionPool), so a run repeated reuses pages already faulted in;
// - adopted ones (Adopt) keep the std::string they were given, so a loader hands the
//   bytes it parsed to the tensor without copying them;
// - borrowed ones (Borrow) read bytes someone else owns (a numpy array handed to the
//   Python extension's `run`), kept alive by an owner handle; they are never written: a
//   write through a Tensor copies them first, as if they were shared.
class TensorBuffer {
 public:
  // Buffers of this many bytes or more get a 2 MiB-aligned mapping of their own.
  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  // Buffers from this many bytes up to kHugePageBytes share mapped regions (smaller
  // ones are one heap block with their header).
  static constexpr size_t kPooledMinBytes = size_t{64} << 10;

  // A buffer of `size` bytes whose contents are unspecified, with one reference.
  static TensorBuffer* Allocate(size_t size);
  // A buffer holding a copy of `bytes`, with one reference.
  static TensorBuffer* Copy(absl::string_view bytes);
  // A buffer holding `bytes`, with one reference: takes the string's storage without
  // copying when it is on the heap, aligned for any element type and not much larger
  // than the bytes (a parsed string of 4 KiB and more, in practice); copies otherwise.
  static TensorBuffer* Adopt(std::string bytes);
  // A buffer over `size` bytes at `data`, with one reference, which `owner` keeps alive:
  // the owner is released (its deleter runs, on the thread that drops the last reference)
  // when the buffer is freed. The bytes are only read (shared() is always true, so
  // Tensor::mutable_raw_data copies them first). Copies instead, releasing `owner` at
  // once, when `data` is not aligned for any element type, as every buffer's data is.
  static TensorBuffer* Borrow(const void* data, size_t size, std::shared_ptr<const void> owner);

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();  // Frees the block (and the data's storage) when the last reference goes.
  // True if another reference may read the bytes, so a writer must copy them first.
  bool shared() const {
    return storage_ == Storage::kBorrowed || refs_.load(std::memory_order_acquire) > 1;
  }

  // True for Borrow's buffers: their owner may write the bytes at any time.
  bool borrowed() const { return storage_ == Storage::kBorrowed; }
  // The owner handle Borrow was given, or nullptr for a buffer that does not borrow.
  const std::shared_ptr<const void>* borrowed_from() const {
    return storage_ == Storage::kBorrowed ? &external()->borrowed_from : nullptr;
  }

  size_t size() const { return size_; }
  char* data() { return storage_ == Storage::kInline ? inline_data() : external()->data; }
  const char* data() const {
    return storage_ == Storage::kInline ? inline_data() : external()->data;
  }

 private:
  enum class Storage : uint32_t { kInline, kMapped, kPooled, kString, kBorrowed };
  // What follows the header of a buffer whose data is elsewhere.
  struct alignas(std::max_align_t) External {
    char* data;
    size_t mapped_length;              // kMapped: the mapping's length (a page multiple).
    tensor_internal::Region* region;  // kPooled: the region the data is in.
    std::string owner;                 // kString: the adopted storage.
    std::shared_ptr<const void> borrowed_from;  // kBorrowed: keeps the bytes alive.
  };
  TensorBuffer(size_t size, Storage storage) : storage_(storage), size_(size) {}
  ~TensorBuffer() = default;
  // A header for data stored elsewhere; its External is set, its data pointer too.
  static TensorBuffer* NewExternal(size_t size, Storage storage, char* data);
  char* inline_data() const {
    return const_cast<char*>(reinterpret_cast<const char*>(this)) + sizeof(TensorBuffer);
  }
  External* external() const { return reinterpret_cast<External*>(inline_data()); }

  // 32-bit count and storage kind side by side: the header stays 16 bytes.
  alignas(std::max_align_t) std::atomic<int32_t> refs_{1};
  Storage storage_;
  size_t size_;
};

enum class QScheme : uint8_t {
  kNone = 0,
  kPerTensorAffine = 1,
  kPerChannelAffine = 2,
};

// Per-tensor parameters (one scale, one zero point) live inline: a quantized tensor
// costs no heap block beyond its bytes. Per-channel ones spill to the heap.
struct QuantParams {
  QScheme scheme = QScheme::kNone;
  InlineVector<double, 1> scales;       // 1 for per-tensor, shape[axis] for per-channel.
  InlineVector<int64_t, 1> zero_points; // same length as scales.
  int64_t axis = 0;                     // per-channel only.

  // The largest scale a quantized tensor may carry: the model file's limit, and the bound
  // an observer checks before it hands out a scale, so a computed scale always saves and
  // loads. Past it, the products of scales in requantization leave float's range.
  static constexpr double kMaxScale = 1e30;

  static QuantParams PerTensor(double scale, int64_t zero_point);
  static QuantParams PerChannel(std::vector<double> scales, std::vector<int64_t> zero_points,
                                int64_t axis);
  friend bool operator==(const QuantParams& a, const QuantParams& b);
};

class Tensor {
 public:
  Tensor() = default;  // An empty float32 tensor of shape [0].
  // Copies share the buffer (a refcount increment); moves take it. Inline: the passes
  // move tensors through StatusOr, module lists and structs several times per node.
  Tensor(const Tensor& other)
      : dtype_(other.dtype_),
        shape_(other.shape_),
        numel_(other.numel_),
        qparams_(other.qparams_),
        buffer_(other.buffer_) {
    if (buffer_ != nullptr) buffer_->Ref();
  }
  Tensor(Tensor&& other) noexcept
      : dtype_(other.dtype_),
        shape_(std::move(other.shape_)),
        numel_(other.numel_),
        qparams_(std::move(other.qparams_)),
        buffer_(other.buffer_) {
    other.buffer_ = nullptr;
  }
  Tensor& operator=(const Tensor& other) {
    if (this != &other) *this = Tensor(other);
    return *this;
  }
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      dtype_ = other.dtype_;
      shape_ = std::move(other.shape_);
      numel_ = other.numel_;
      qparams_ = std::move(other.qparams_);
      if (buffer_ != nullptr) buffer_->Unref();
      buffer_ = other.buffer_;
      other.buffer_ = nullptr;
    }
    return *this;
  }
  ~Tensor() {
    if (buffer_ != nullptr) buffer_->Unref();
  }

  // A zero-filled tensor. Fails on a negative dimension, a dtype tensors cannot have, or
  // an element count past kMaxElements.
  static absl::StatusOr<Tensor> Zeros(DType dtype, Shape shape, QuantParams qparams = {});
  // A tensor whose data is NOT initialized: the caller promises to write every byte
  // (through mutable_raw_data() / mutable_data<T>()) before reading any. Saves Zeros'
  // fill when a kernel or pass overwrites the whole buffer anyway. Same errors as Zeros.
  static absl::StatusOr<Tensor> Uninitialized(DType dtype, Shape shape,
                                              QuantParams qparams = {});
  // `bytes` as the data; its size must equal numel * element size. A string moved in
  // is kept as the data without a copy when it is large (TensorBuffer::Adopt); a short
  // one is copied into the tensor's block.
  static absl::StatusOr<Tensor> FromBytes(DType dtype, Shape shape, std::string bytes,
                                          QuantParams qparams = {});
  // As FromBytes, from any contiguous bytes, without an intermediate std::string.
  static absl::StatusOr<Tensor> CopyFromBytes(DType dtype, Shape shape,
                                              absl::string_view bytes,
                                              QuantParams qparams = {});
  // As CopyFromBytes, but the tensor reads `bytes` in place (TensorBuffer::Borrow), kept
  // alive by `owner`, and copies them only when written (or when they are not aligned).
  // E.g. a numpy array's data, with the array as the owner.
  static absl::StatusOr<Tensor> BorrowBytes(DType dtype, Shape shape, absl::string_view bytes,
                                            std::shared_ptr<const void> owner,
                                            QuantParams qparams = {});
  // Convenience for tests and kernels (shape must match values.size(); CHECKs that).
  static Tensor FromFloats(Shape shape, absl::Span<const float> values);
  static Tensor FromInt64s(Shape shape, absl::Span<const int64_t> values);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return buffer_ != nullptr ? buffer_->size() : 0; }
  const QuantParams& qparams() const { return qparams_; }
  void set_qparams(QuantParams qparams) { qparams_ = std::move(qparams); }
  bool is_quantized() const { return IsQuantized(dtype_); }
  // True if the bytes are someone else's (BorrowBytes: a numpy array or a torch tensor
  // handed in), who may write them at any time: nothing derived from them may be cached
  // beyond one call.
  bool borrows_bytes() const { return buffer_ != nullptr && buffer_->borrowed(); }
  // The owner handle of borrowed bytes (what BorrowBytes was given: e.g. the numpy array
  // that lent them), or nullptr if the bytes are not borrowed. The lender recognizes its
  // own bytes by it when they come back (std::get_deleter on the handle) and can take
  // them back without a copy: the engine never writes borrowed bytes.
  const std::shared_ptr<const void>* bytes_owner() const {
    return buffer_ != nullptr ? buffer_->borrowed_from() : nullptr;
  }

  // The data as bytes; valid until this tensor is written, reassigned or destroyed.
  absl::string_view bytes() const { return {static_cast<const char*>(raw_data()), nbytes()}; }
  // Never null; aligned for any element type. Empty tensors share a static empty area.
  const void* raw_data() const;
  // Detaches from other tensors sharing the buffer first (copies it), so writes through
  // the pointer are seen by this tensor only.
  void* mutable_raw_data();
  // True if a write through mutable_raw_data() would copy the buffer first (another tensor
  // shares it, or its bytes are borrowed). A writer that overwrites every element can then
  // write into a fresh Uninitialized tensor instead and skip the copy.
  bool shares_data() const { return buffer_ != nullptr && buffer_->shared(); }

  template <typename T>
  const T* data() const { return static_cast<const T*>(raw_data()); }
  template <typename T>
  T* mutable_data() { return static_cast<T*>(mutable_raw_data()); }

  // Same data, new shape of equal element count.
  absl::StatusOr<Tensor> Reshaped(Shape shape) const;

  // Same dtype, shape, qparams and bytes.
  friend bool operator==(const Tensor& a, const Tensor& b);
  std::string ShapeString() const;  // "[1, 3, 224, 224]"

  // The one size limit of the project: at most 2^28 elements in one tensor, i.e. 1 GiB
  // of float32 and 2 GiB for the widest dtype (8 bytes). Every size taken from input is
  // checked against it before anything is allocated: tensor creation (CheckedNumel, so
  // every factory above), the model and .npy loaders, kernels computing an output or
  // scratch size, and the generated calibration inputs. The largest tensors of the models
  // this project targets (resnet50's activations at batch 1: 8·10^5 elements) are far
  // below it; past it a model or flag is hostile or wrong, and the allocation would
  // likely fail anyway (the build machines have a few GiB per process).
  static constexpr int64_t kMaxElements = int64_t{1} << 28;

 private:
  // Checks dtype and shape; on success a tensor with them, numel set and no buffer.
  static absl::StatusOr<Tensor> WithoutData(DType dtype, Shape shape, QuantParams qparams);
  // FromBytes' error for `actual` bytes given for a tensor like `t`.
  static absl::Status WrongByteCount(size_t actual, const Tensor& t);

  DType dtype_ = DType::kFloat32;
  Shape shape_ = {0};
  int64_t numel_ = 0;
  QuantParams qparams_;
  TensorBuffer* buffer_ = nullptr;  // One reference owned; null when nbytes() == 0.
};

// Element count of `shape`, or an error for a negative dimension, a dimension or a count
// past Tensor::kMaxElements (checked without overflow).
absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_TENSOR_H_
