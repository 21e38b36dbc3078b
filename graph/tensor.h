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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/dtype.h"

namespace fuselage {

// The dimensions of a tensor, stored inline up to kInlineDims (every tensor of a CNN or
// transformer; more spill to the heap). It offers the parts of std::vector<int64_t>'s
// interface that callers use, converts implicitly from a std::vector<int64_t>, a braced
// list, an absl::Span<const int64_t> or an iterator range, and converts implicitly to a
// std::vector<int64_t> (which allocates: prefer passing a Shape or a Span).
class Shape {
 public:
  static constexpr size_t kInlineDims = 6;
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Shape() = default;  // Rank 0 (a scalar's shape).
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  Shape(const std::vector<int64_t>& dims) : dims_(dims.begin(), dims.end()) {}  // NOLINT
  Shape(absl::Span<const int64_t> dims) : dims_(dims.begin(), dims.end()) {}    // NOLINT
  template <typename InputIt,
            typename = decltype(static_cast<int64_t>(*std::declval<InputIt&>()))>
  Shape(InputIt first, InputIt last) : dims_(first, last) {}

  operator std::vector<int64_t>() const { return {begin(), end()}; }  // NOLINT
  std::vector<int64_t> ToVector() const { return {begin(), end()}; }

  size_t size() const { return dims_.size(); }
  bool empty() const { return dims_.empty(); }
  const int64_t* data() const { return dims_.data(); }
  int64_t* data() { return dims_.data(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  int64_t front() const { return dims_.front(); }
  int64_t back() const { return dims_.back(); }
  const_iterator begin() const { return dims_.data(); }
  const_iterator end() const { return dims_.data() + dims_.size(); }
  iterator begin() { return dims_.data(); }
  iterator end() { return dims_.data() + dims_.size(); }
  void push_back(int64_t d) { dims_.push_back(d); }
  void resize(size_t n, int64_t d = 0) { dims_.resize(n, d); }
  void clear() { dims_.clear(); }

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  friend bool operator==(const Shape& a, const std::vector<int64_t>& b) {
    return absl::MakeConstSpan(a.data(), a.size()) == absl::MakeConstSpan(b);
  }
  friend bool operator==(const std::vector<int64_t>& a, const Shape& b) { return b == a; }
  friend bool operator!=(const Shape& a, const std::vector<int64_t>& b) { return !(a == b); }
  friend bool operator!=(const std::vector<int64_t>& a, const Shape& b) { return !(b == a); }
  // "[1, 3, 224, 224]"; also how gtest prints a Shape.
  friend std::ostream& operator<<(std::ostream& os, const Shape& shape);
  friend void PrintTo(const Shape& shape, std::ostream* os) { *os << shape; }

 private:
  absl::InlinedVector<int64_t, kInlineDims> dims_;
};

// The bytes of a tensor: one heap block holding this header, then the data, aligned for
// any element type (alignof(std::max_align_t)). Refcounted by the Tensors that share it;
// a Tensor writes to it only when it holds the only reference (copy-on-write).
class TensorBuffer {
 public:
  // A buffer of `size` bytes whose contents are unspecified, with one reference.
  static TensorBuffer* Allocate(size_t size);
  // A buffer holding a copy of `bytes`, with one reference.
  static TensorBuffer* Copy(absl::string_view bytes);

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();  // Frees the block when the last reference goes.
  bool shared() const { return refs_.load(std::memory_order_acquire) > 1; }

  size_t size() const { return size_; }
  char* data() { return reinterpret_cast<char*>(this) + sizeof(TensorBuffer); }
  const char* data() const { return reinterpret_cast<const char*>(this) + sizeof(TensorBuffer); }

 private:
  explicit TensorBuffer(size_t size) : size_(size) {}
  ~TensorBuffer() = default;

  alignas(std::max_align_t) std::atomic<int64_t> refs_{1};
  size_t size_;
};

enum class QScheme : uint8_t {
  kNone = 0,
  kPerTensorAffine = 1,
  kPerChannelAffine = 2,
};

struct QuantParams {
  QScheme scheme = QScheme::kNone;
  std::vector<double> scales;       // 1 for per-tensor, shape[axis] for per-channel.
  std::vector<int64_t> zero_points; // same length as scales.
  int64_t axis = 0;                 // per-channel only.

  static QuantParams PerTensor(double scale, int64_t zero_point);
  static QuantParams PerChannel(std::vector<double> scales, std::vector<int64_t> zero_points,
                                int64_t axis);
  friend bool operator==(const QuantParams& a, const QuantParams& b);
};

class Tensor {
 public:
  Tensor() = default;  // An empty float32 tensor of shape [0].
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  // A zero-filled tensor. Fails on a negative dimension, a dtype tensors cannot have, or
  // an element count past kMaxElements.
  static absl::StatusOr<Tensor> Zeros(DType dtype, Shape shape, QuantParams qparams = {});
  // A tensor whose data is NOT initialized: the caller promises to write every byte
  // (through mutable_raw_data() / mutable_data<T>()) before reading any. Saves Zeros'
  // fill when a kernel or pass overwrites the whole buffer anyway. Same errors as Zeros.
  static absl::StatusOr<Tensor> Uninitialized(DType dtype, Shape shape,
                                              QuantParams qparams = {});
  // A copy of `bytes` as the data; its size must equal numel * element size. (The
  // bytes are copied once into the tensor's block; moving a std::string in saves nothing.)
  static absl::StatusOr<Tensor> FromBytes(DType dtype, Shape shape, std::string bytes,
                                          QuantParams qparams = {});
  // As FromBytes, from any contiguous bytes, without an intermediate std::string.
  static absl::StatusOr<Tensor> CopyFromBytes(DType dtype, Shape shape,
                                              absl::string_view bytes,
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

  // The data as bytes; valid until this tensor is written, reassigned or destroyed.
  absl::string_view bytes() const { return {static_cast<const char*>(raw_data()), nbytes()}; }
  // Never null; aligned for any element type. Empty tensors share a static empty area.
  const void* raw_data() const;
  // Detaches from other tensors sharing the buffer first (copies it), so writes through
  // the pointer are seen by this tensor only.
  void* mutable_raw_data();

  template <typename T>
  const T* data() const { return static_cast<const T*>(raw_data()); }
  template <typename T>
  T* mutable_data() { return static_cast<T*>(mutable_raw_data()); }

  // Same data, new shape of equal element count.
  absl::StatusOr<Tensor> Reshaped(Shape shape) const;

  // Same dtype, shape, qparams and bytes.
  friend bool operator==(const Tensor& a, const Tensor& b);
  std::string ShapeString() const;  // "[1, 3, 224, 224]"

  // Upper bound on elements of one tensor: 2^31. Beyond it a model is hostile or wrong.
  static constexpr int64_t kMaxElements = int64_t{1} << 31;

 private:
  // Checks dtype and shape; on success a tensor with them, numel set and no buffer.
  static absl::StatusOr<Tensor> WithoutData(DType dtype, Shape shape, QuantParams qparams);

  DType dtype_ = DType::kFloat32;
  Shape shape_ = {0};
  int64_t numel_ = 0;
  QuantParams qparams_;
  TensorBuffer* buffer_ = nullptr;  // One reference owned; null when nbytes() == 0.
};

// Element count of `shape`, or an error for a negative dimension or a count past
// Tensor::kMaxElements (checked without overflow).
absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_TENSOR_H_
