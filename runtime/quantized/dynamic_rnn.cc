#include "runtime/quantized/dynamic_rnn.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/module.h"
#include "graph/status_macros.h"
#include "graph/tensor.h"
#include "runtime/kernel_args.h"
#include "runtime/quantized/dynamic_linear.h"
#include "runtime/quantized/kernel_loops.h"
#include "runtime/value.h"

namespace fuselage {
namespace {

struct RnnConfig {
  bool lstm = true;
  int64_t gates = 4;
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  int64_t directions = 1;
  bool bias = true;
  bool batch_first = false;
  bool float16 = false;
};

struct CellWeights {
  const Tensor* w_ih = nullptr;
  const Tensor* w_hh = nullptr;
  const Tensor* b_ih = nullptr;
  const Tensor* b_hh = nullptr;
};

absl::StatusOr<RnnConfig> ReadConfig(const Module& m, bool lstm) {
  const std::string type(m.type().name());
  RnnConfig c;
  c.lstm = lstm;
  c.gates = lstm ? 4 : 3;
  ASSIGN_OR_RETURN(c.input_size, m.GetInt("input_size"));
  ASSIGN_OR_RETURN(c.hidden_size, m.GetInt("hidden_size"));
  ASSIGN_OR_RETURN(c.num_layers, m.GetInt("num_layers"));
  ASSIGN_OR_RETURN(c.bias, m.GetBool("bias"));
  ASSIGN_OR_RETURN(c.batch_first, m.GetBool("batch_first"));
  ASSIGN_OR_RETURN(const bool bidirectional, m.GetBool("bidirectional"));
  c.directions = bidirectional ? 2 : 1;
  if (c.input_size < 1 || c.hidden_size < 1 || c.num_layers < 1 || c.input_size > (1 << 24) ||
      c.hidden_size > (1 << 24) || c.num_layers > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        type, ": input_size ", c.input_size, ", hidden_size ", c.hidden_size, ", num_layers ",
        c.num_layers, "; expected each positive (at most 2^24, 1024 layers)"));
  }
  if (const Argument* proj = m.FindAttribute("proj_size");
      proj != nullptr && !(proj->is_int() && proj->as_int() == 0)) {
    return absl::UnimplementedError(absl::StrCat(
        type, ": proj_size ", proj->ToString(),
        "; a dynamically quantized LSTM has no projection (expected 0)"));
  }
  if (const Argument* dtype = m.FindAttribute("dtype"); dtype != nullptr) {
    if (!dtype->is_dtype() ||
        (dtype->as_dtype() != DType::kQInt8 && dtype->as_dtype() != DType::kFloat16)) {
      return absl::InvalidArgumentError(absl::StrCat(
          type, ": attribute dtype is ", dtype->ToString(),
          "; expected torch.qint8 or torch.float16"));
    }
    c.float16 = dtype->as_dtype() == DType::kFloat16;
  }
  return c;
}

// The weights of layer `layer`, direction `dir`, with their shapes checked.
absl::StatusOr<CellWeights> ReadCell(const Module& m, const RnnConfig& c, int64_t layer,
                                     int64_t dir) {
  const std::string suffix = absl::StrCat("_l", layer, dir == 1 ? "_reverse" : "");
  const int64_t rows = c.gates * c.hidden_size;
  const int64_t in = layer == 0 ? c.input_size : c.directions * c.hidden_size;
  const DType weight_dtype = c.float16 ? DType::kFloat32 : DType::kQInt8;
  CellWeights w;
  for (auto [name, cols, slot] :
       {std::tuple<const char*, int64_t, const Tensor**>{"weight_ih", in, &w.w_ih},
        {"weight_hh", c.hidden_size, &w.w_hh}}) {
    const std::string full = absl::StrCat(name, suffix);
    const Tensor* t = m.FindTensor(full);
    if (t == nullptr || t->dtype() != weight_dtype || t->dim() != 2 || t->shape()[0] != rows ||
        t->shape()[1] != cols) {
      return absl::InvalidArgumentError(absl::StrCat(
          m.type().name(), ": tensor '", full, "' is ",
          t == nullptr ? std::string("missing")
                       : absl::StrCat(DTypeName(t->dtype()), " ", t->ShapeString()),
          "; expected ", DTypeName(weight_dtype), " [", rows, ", ", cols, "]"));
    }
    *slot = t;
  }
  if (c.bias) {
    for (auto [name, slot] : {std::pair<const char*, const Tensor**>{"bias_ih", &w.b_ih},
                              {"bias_hh", &w.b_hh}}) {
      const std::string full = absl::StrCat(name, suffix);
      const Tensor* t = m.FindTensor(full);
      if (t == nullptr || t->dtype() != DType::kFloat32 || t->dim() != 1 ||
          t->shape()[0] != rows) {
        return absl::InvalidArgumentError(absl::StrCat(
            m.type().name(), ": tensor '", full, "' is ",
            t == nullptr ? std::string("missing")
                         : absl::StrCat(DTypeName(t->dtype()), " ", t->ShapeString()),
            "; expected torch.float32 [", rows, "] (bias is True)"));
      }
      *slot = t;
    }
  }
  return w;
}

absl::StatusOr<Tensor> Linear(const RnnConfig& c, const Tensor& x, const Tensor& w,
                              const Tensor* b, QuantizedEngine engine) {
  if (c.float16) return quantized::Float16DynamicLinear(x, w, b);
  return quantized::DynamicQuantizedLinear(x, w, b, /*reduce_range=*/true, engine);
}

// One direction of one layer over `input` [T, B, in]: writes h_t into
// out[t, b, dir * H ...] (row stride out_stride) and leaves the final state in h, cell.
absl::Status RunDirection(const RnnConfig& c, const CellWeights& w, const Tensor& input,
                          bool reverse, QuantizedEngine engine, std::vector<float>& h,
                          std::vector<float>& cell, float* out, int64_t out_stride) {
  const int64_t steps = input.shape()[0], batch = input.shape()[1];
  const int64_t hidden = c.hidden_size, g = c.gates * hidden;
  ASSIGN_OR_RETURN(Tensor ih, Linear(c, input, *w.w_ih, w.b_ih, engine));
  const float* ih_data = ih.data<float>();
  std::vector<float> scratch((c.gates + 1) * hidden);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    const Tensor h_tensor = Tensor::FromFloats({batch, hidden}, h);
    ASSIGN_OR_RETURN(Tensor hh, Linear(c, h_tensor, *w.w_hh, w.b_hh, engine));
    const float* hh_data = hh.data<float>();
    for (int64_t b = 0; b < batch; ++b) {
      const float* gi = ih_data + (t * batch + b) * g;
      const float* gh = hh_data + b * g;
      float* hb = h.data() + b * hidden;
      float* ob = out + (t * batch + b) * out_stride;
      if (c.lstm) {
        quantized::LstmCellRow(gh, gi, hidden, cell.data() + b * hidden, hb, ob,
                               scratch.data());
      } else {
        quantized::GruCellRow(gh, gi, hidden, hb, ob, scratch.data());
      }
    }
  }
  return absl::OkStatus();
}

// The initial state `name` ([L * D, B, H], float32), or zeros when absent.
absl::StatusOr<std::vector<float>> InitialState(const Module& m, const Value* v,
                                                absl::string_view name, int64_t count,
                                                int64_t batch, int64_t hidden) {
  const size_t size = static_cast<size_t>(count * batch * hidden);
  if (v == nullptr || v->is_none()) return std::vector<float>(size, 0.0f);
  if (!v->is_tensor() || v->as_tensor().dtype() != DType::kFloat32 ||
      !(v->as_tensor().shape() == Shape{count, batch, hidden})) {
    return absl::InvalidArgumentError(absl::StrCat(
        m.type().name(), ": ", name, " is ",
        v->is_tensor() ? absl::StrCat(DTypeName(v->as_tensor().dtype()), " ",
                                      v->as_tensor().ShapeString())
                       : std::string(v->KindName()),
        "; expected torch.float32 [", count, ", ", batch, ", ", hidden,
        "] (num_layers * directions, batch, hidden_size)"));
  }
  const float* d = v->as_tensor().data<float>();
  return std::vector<float>(d, d + size);
}

// [A, B, F] -> [B, A, F].
Tensor SwapFirstDims(const Tensor& x) {
  const int64_t a = x.shape()[0], b = x.shape()[1], f = x.shape()[2];
  std::vector<float> out(static_cast<size_t>(x.numel()));
  const float* src = x.data<float>();
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t j = 0; j < b; ++j) {
      std::copy(src + (i * b + j) * f, src + (i * b + j + 1) * f, out.data() + (j * a + i) * f);
    }
  }
  return Tensor::FromFloats({b, a, f}, out);
}

absl::StatusOr<Value> RunDynamicRnn(const KernelContext& ctx, const Module& m,
                                    absl::Span<const Value> args, const ValueKwargs& kwargs,
                                    bool lstm) {
  const std::string type(m.type().name());
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetFloatTensor(0, "input"));
  ASSIGN_OR_RETURN(const RnnConfig c, ReadConfig(m, lstm));
  if (x->dim() != 3 || x->shape()[2] != c.input_size || x->shape()[0] < 1 ||
      x->shape()[1] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        type, ": input has shape ", x->ShapeString(), "; expected ",
        c.batch_first ? "[batch, seq_len, " : "[seq_len, batch, ", c.input_size,
        "] (3-d, non-empty; input_size ", c.input_size, ")"));
  }
  std::vector<CellWeights> cells;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    for (int64_t dir = 0; dir < c.directions; ++dir) {
      ASSIGN_OR_RETURN(CellWeights w, ReadCell(m, c, layer, dir));
      cells.push_back(w);
    }
  }
  Tensor input = c.batch_first ? SwapFirstDims(*x) : *x;
  const int64_t steps = input.shape()[0], batch = input.shape()[1], hidden = c.hidden_size;
  const int64_t states = c.num_layers * c.directions;
  const Value* hx = r.Find(1, "hx");
  const Value* h0 = hx;
  const Value* c0 = nullptr;
  if (lstm && hx != nullptr && !hx->is_none()) {
    if (!hx->is_list() || hx->items().size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          type, ": hx is ", hx->KindName(), "; expected a tuple (h0, c0) or None"));
    }
    h0 = &hx->items()[0];
    c0 = &hx->items()[1];
  }
  ASSIGN_OR_RETURN(std::vector<float> h_all,
                   InitialState(m, h0, lstm ? "h0" : "hx", states, batch, hidden));
  std::vector<float> c_all;
  if (lstm) {
    ASSIGN_OR_RETURN(c_all, InitialState(m, c0, "c0", states, batch, hidden));
  }
  const size_t state_size = static_cast<size_t>(batch * hidden);
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const int64_t width = c.directions * hidden;
    std::vector<float> out(static_cast<size_t>(steps * batch * width));
    for (int64_t dir = 0; dir < c.directions; ++dir) {
      const size_t k = static_cast<size_t>(layer * c.directions + dir);
      std::vector<float> h(h_all.begin() + k * state_size, h_all.begin() + (k + 1) * state_size);
      std::vector<float> cell;
      if (lstm) {
        cell.assign(c_all.begin() + k * state_size, c_all.begin() + (k + 1) * state_size);
      }
      absl::Status st = RunDirection(c, cells[k], input, dir == 1, ctx.engine, h, cell,
                                     out.data() + dir * hidden, width);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat(type, ": layer ", layer,
                                                     dir == 1 ? " (reverse)" : "", ": ",
                                                     st.message()));
      }
      std::copy(h.begin(), h.end(), h_all.begin() + k * state_size);
      if (lstm) std::copy(cell.begin(), cell.end(), c_all.begin() + k * state_size);
    }
    input = Tensor::FromFloats({steps, batch, width}, out);
  }
  Value output(c.batch_first ? SwapFirstDims(input) : std::move(input));
  Value h_n(Tensor::FromFloats({states, batch, hidden}, h_all));
  if (!lstm) return Value::Tuple({std::move(output), std::move(h_n)});
  Value c_n(Tensor::FromFloats({states, batch, hidden}, c_all));
  return Value::Tuple({std::move(output), Value::Tuple({std::move(h_n), std::move(c_n)})});
}

}  // namespace

absl::Status RegisterDynamicRnnKernels(KernelRegistry& registry) {
  for (const bool lstm : {true, false}) {
    RETURN_IF_ERROR(registry.RegisterModule(
        lstm ? "nnqd.LSTM" : "nnqd.GRU",
        [lstm](const KernelContext& ctx, const Module& m, absl::Span<const Value> args,
               const ValueKwargs& kwargs) { return RunDynamicRnn(ctx, m, args, kwargs, lstm); }));
  }
  return absl::OkStatus();
}

}  // namespace fuselage
