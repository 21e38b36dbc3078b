#include "bench/synthetic_network.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

class NetworkBuilder {
 public:
  explicit NetworkBuilder(const SyntheticNetworkOptions& options)
      : options_(options), gm_(std::make_unique<GraphModule>()), rng_(options.seed) {
    const int64_t c = options.channels;
    std::vector<float> conv_w(static_cast<size_t>(c * c * 9));
    std::vector<float> linear_w(static_cast<size_t>(c * c));
    std::vector<float> vec(static_cast<size_t>(c));
    std::normal_distribution<float> normal(0.0f, 0.1f);
    for (float& v : conv_w) v = normal(rng_);
    for (float& v : linear_w) v = normal(rng_);
    for (float& v : vec) v = normal(rng_);
    conv_weight_ = Tensor::FromFloats({c, c, 3, 3}, conv_w);
    linear_weight_ = Tensor::FromFloats({c, c}, linear_w);
    vector_ = Tensor::FromFloats({c}, vec);
    std::vector<float> ones(static_cast<size_t>(c), 1.0f);
    ones_ = Tensor::FromFloats({c}, ones);
  }

  absl::StatusOr<std::unique_ptr<GraphModule>> Build() {
    Graph& g = gm_->graph();
    ASSIGN_OR_RETURN(Node * x, g.AddPlaceholder("x"));
    std::uniform_int_distribution<int> pick(0, 9);
    while (static_cast<int64_t>(g.size()) + 1 < options_.target_nodes) {
      const int p = pick(rng_);
      if (p < 3) {
        ASSIGN_OR_RETURN(x, ConvBnRelu(x));
      } else if (p < 6) {
        ASSIGN_OR_RETURN(x, Residual(x));
      } else if (p < 7) {
        ASSIGN_OR_RETURN(x, LinearRelu(x));
      } else if (p < 8) {
        ASSIGN_OR_RETURN(x, Pool(x));
      } else {
        ASSIGN_OR_RETURN(x, SharedBnBranch(x));
      }
    }
    RETURN_IF_ERROR(g.SetOutput(x).status());
    return std::move(gm_);
  }

 private:
  std::string NextPath(absl::string_view kind) { return absl::StrCat(kind, block_++); }

  absl::StatusOr<Node*> Call(std::unique_ptr<Module> module, std::vector<Argument> args) {
    const std::string path = NextPath(module->type().name().substr(3));  // drop "nn."
    if (options_.create_modules) RETURN_IF_ERROR(gm_->SetModule(path, std::move(module)));
    return gm_->graph().AddCallModule(path, std::move(args));
  }

  std::unique_ptr<Module> Conv() {
    auto m = std::make_unique<Module>("nn.Conv2d");
    m->SetTensor("weight", conv_weight_);
    m->SetTensor("bias", vector_);
    m->SetAttribute("in_channels", Argument::Int(options_.channels));
    m->SetAttribute("out_channels", Argument::Int(options_.channels));
    m->SetAttribute("kernel_size", Argument::Ints({3, 3}));
    m->SetAttribute("stride", Argument::Ints({1, 1}));
    m->SetAttribute("padding", Argument::Ints({1, 1}));
    m->SetAttribute("dilation", Argument::Ints({1, 1}));
    m->SetAttribute("groups", Argument::Int(1));
    m->SetAttribute("padding_mode", Argument::String("zeros"));
    return m;
  }

  std::unique_ptr<Module> BatchNorm() {
    auto m = std::make_unique<Module>("nn.BatchNorm2d");
    m->SetTensor("weight", ones_);
    m->SetTensor("bias", vector_);
    m->SetTensor("running_mean", vector_);
    m->SetTensor("running_var", ones_);
    m->SetAttribute("num_features", Argument::Int(options_.channels));
    m->SetAttribute("eps", Argument::Float(1e-5));
    m->SetAttribute("momentum", Argument::Float(0.1));
    return m;
  }

  absl::StatusOr<Node*> ConvBnRelu(Node* x) {
    ASSIGN_OR_RETURN(Node * conv, Call(Conv(), {x}));
    ASSIGN_OR_RETURN(Node * bn, Call(BatchNorm(), {conv}));
    return Call(std::make_unique<Module>("nn.ReLU"), {bn});
  }

  absl::StatusOr<Node*> Residual(Node* x) {
    ASSIGN_OR_RETURN(Node * conv, Call(Conv(), {x}));
    ASSIGN_OR_RETURN(Node * bn, Call(BatchNorm(), {conv}));
    ASSIGN_OR_RETURN(Node * add, gm_->graph().AddCallFunction("operator.add", {bn, x}));
    return Call(std::make_unique<Module>("nn.ReLU"), {add});
  }

  absl::StatusOr<Node*> LinearRelu(Node* x) {
    auto m = std::make_unique<Module>("nn.Linear");
    m->SetTensor("weight", linear_weight_);
    m->SetTensor("bias", vector_);
    m->SetAttribute("in_features", Argument::Int(options_.channels));
    m->SetAttribute("out_features", Argument::Int(options_.channels));
    ASSIGN_OR_RETURN(Node * linear, Call(std::move(m), {x}));
    return gm_->graph().AddCallFunction("torch.nn.functional.relu", {linear});
  }

  absl::StatusOr<Node*> Pool(Node* x) {
    auto m = std::make_unique<Module>("nn.MaxPool2d");
    m->SetAttribute("kernel_size", Argument::Ints({1, 1}));
    m->SetAttribute("stride", Argument::Ints({1, 1}));
    m->SetAttribute("padding", Argument::Ints({0, 0}));
    m->SetAttribute("dilation", Argument::Ints({1, 1}));
    m->SetAttribute("ceil_mode", Argument::Bool(false));
    return Call(std::move(m), {x});
  }

  absl::StatusOr<Node*> SharedBnBranch(Node* x) {
    ASSIGN_OR_RETURN(Node * conv, Call(Conv(), {x}));
    ASSIGN_OR_RETURN(Node * bn, Call(BatchNorm(), {conv}));
    ASSIGN_OR_RETURN(Node * relu, Call(std::make_unique<Module>("nn.ReLU"), {bn}));
    ASSIGN_OR_RETURN(Node * mul,
                     gm_->graph().AddCallFunction("operator.mul", {bn, Argument::Float(2.0)}));
    return gm_->graph().AddCallFunction("operator.add", {relu, mul});
  }

  const SyntheticNetworkOptions& options_;
  std::unique_ptr<GraphModule> gm_;
  std::mt19937 rng_;
  int64_t block_ = 0;
  Tensor conv_weight_, linear_weight_, vector_, ones_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GraphModule>> BuildSyntheticNetwork(
    const SyntheticNetworkOptions& options) {
  if (options.target_nodes < 2 || options.channels < 1) {
    return absl::InvalidArgumentError("synthetic network: need target_nodes >= 2, channels >= 1");
  }
  return NetworkBuilder(options).Build();
}

}  // namespace fuselage
