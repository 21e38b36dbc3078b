// The tutorial "Your own fusion pattern and fused module" (docs/tutorials/fusion_pattern.md
// shows this file verbatim; tests/docs/docs_in_sync_test.sh checks that it does).
//
// conv -> mul(., s) -> relu becomes one call of a new fused module user.ConvMulReLU2d that
// takes two inputs, (x, s), and the fused model computes what the unfused one did.
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/module_schema.h"
#include "graph/printer.h"
#include "graph/status_macros.h"
#include "gtest/gtest.h"
#include "patterns/fuse.h"
#include "patterns/fusion_rule.h"
#include "patterns/matcher.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace {

using fuselage::Argument;
using fuselage::GraphModule;
using fuselage::KernelContext;
using fuselage::Module;
using fuselage::Tensor;
using fuselage::Value;

// Step 1: the fused module type. Its forward takes two inputs (the conv's input and the
// multiplier); like PyTorch's fused modules it holds its parts as children "0" (the conv,
// float or, after convert, reference) and "1" (the relu). Verify() checks every
// user.ConvMulReLU2d module and call against this.
absl::Status RegisterConvMulReLUSchema() {
  fuselage::ModuleSchema schema;
  schema.type = "user.ConvMulReLU2d";
  schema.min_inputs = schema.max_inputs = 2;
  schema.children = {{"nn.Conv2d", "nnqr.Conv2d"}, {"nn.ReLU"}};
  return fuselage::ModuleSchemaRegistry::Global().Register(std::move(schema));
}

// Step 2: its kernel, so the interpreter can run it: child "0", then the product with the
// second input (the built-in operator.mul kernel), then child "1".
absl::Status RegisterConvMulReLUKernel(fuselage::KernelRegistry& kernels) {
  return kernels.RegisterModule(
      "user.ConvMulReLU2d",
      [](const KernelContext& ctx, const Module& module, absl::Span<const Value> args,
         const fuselage::ValueKwargs&) -> absl::StatusOr<Value> {
        const Module* conv = module.FindChild("0");
        const Module* relu = module.FindChild("1");
        const fuselage::FunctionKernel* mul = ctx.registry.FindFunction(
            fuselage::OpKind::kCallFunction, fuselage::Symbol::Intern("operator.mul"));
        if (conv == nullptr || relu == nullptr || mul == nullptr) {
          return absl::FailedPreconditionError("user.ConvMulReLU2d: children 0, 1 expected");
        }
        ASSIGN_OR_RETURN(Value y, ctx.registry.CallModule(ctx, *conv, {args[0]}));
        ASSIGN_OR_RETURN(Value scaled, (*mul)(ctx, {y, args[1]}, {}));
        return ctx.registry.CallModule(ctx, *relu, {scaled});
      });
}

// Step 3: the fusion rule. The pattern is PyTorch's complex format, outermost op first:
// relu of (mul of (conv, anything)). By default the root is the leaf reached along arg 0
// (the conv: the fused node takes its args) and the extra inputs are the MatchAllNode
// positions (s), so the fused node is user.ConvMulReLU2d(x, s). kWrapInSequence makes the
// fused module with the matched modules as children "0", "1" (mul adds no child).
absl::StatusOr<fuselage::PatternMatcher> ConvMulReLUMatcher() {
  ASSIGN_OR_RETURN(fuselage::FusionRule rule,
                   fuselage::MakeFusionRule("conv_mul_relu", "(ReLU, (mul, Conv2d, MatchAllNode))",
                                            fuselage::PatternFormat::kComplex,
                                            "user.ConvMulReLU2d",
                                            fuselage::FuserKind::kWrapInSequence));
  return fuselage::PatternMatcher::Create({std::move(rule)});
}

// Step 4: a model to fuse: y = relu(conv(x) * s), with a 1x1 conv of weight 2, bias -1.
absl::StatusOr<std::unique_ptr<GraphModule>> MakeModel() {
  auto model = std::make_unique<GraphModule>();
  GraphModule& gm = *model;
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {2.0f}));
  conv->SetTensor("bias", Tensor::FromFloats({1}, {-1.0f}));
  conv->SetAttribute("in_channels", Argument::Int(1));
  conv->SetAttribute("out_channels", Argument::Int(1));
  conv->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({0, 0}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(1));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  RETURN_IF_ERROR(gm.SetModule("conv", std::move(conv)));
  RETURN_IF_ERROR(gm.SetModule("relu", std::make_unique<Module>("nn.ReLU")));
  fuselage::Graph& g = gm.graph();
  ASSIGN_OR_RETURN(fuselage::Node * x, g.AddPlaceholder("x"));
  ASSIGN_OR_RETURN(fuselage::Node * s, g.AddPlaceholder("s"));
  ASSIGN_OR_RETURN(fuselage::Node * c, g.AddCallModule("conv", {x}));
  ASSIGN_OR_RETURN(fuselage::Node * m, g.AddCallFunction("operator.mul", {c, s}));
  ASSIGN_OR_RETURN(fuselage::Node * r, g.AddCallModule("relu", {m}));
  RETURN_IF_ERROR(g.SetOutput(r).status());
  RETURN_IF_ERROR(gm.Verify());
  return model;
}

// The model's output for x = [1, -2, 0.5, 3] and s = 3 everywhere.
std::vector<float> RunModel(const GraphModule& gm, const fuselage::KernelRegistry& kernels) {
  Tensor x = Tensor::FromFloats({1, 1, 2, 2}, {1.0f, -2.0f, 0.5f, 3.0f});
  Tensor s = Tensor::FromFloats({1, 1, 2, 2}, {3.0f, 3.0f, 3.0f, 3.0f});
  absl::StatusOr<std::vector<Value>> out = fuselage::Run(gm, {x, s}, kernels);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  const Tensor& y = (*out)[0].as_tensor();
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

// Step 5: fuse, look at the result, run both.
TEST(FusionPatternTutorial, ConvMulReluBecomesOneFusedModuleThatComputesTheSame) {
  ASSERT_TRUE(RegisterConvMulReLUSchema().ok());
  absl::StatusOr<std::unique_ptr<fuselage::KernelRegistry>> kernels = fuselage::BuiltinKernels();
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  ASSERT_TRUE(RegisterConvMulReLUKernel(**kernels).ok());
  absl::StatusOr<fuselage::PatternMatcher> matcher = ConvMulReLUMatcher();
  ASSERT_TRUE(matcher.ok()) << matcher.status();

  absl::StatusOr<std::unique_ptr<GraphModule>> made = MakeModel();
  ASSERT_TRUE(made.ok()) << made.status();
  GraphModule* model = made->get();
  // relu((2x - 1) * 3), by hand: x = 1 -> 3, -2 -> 0, 0.5 -> 0, 3 -> 15.
  const std::vector<float> expected = {3.0f, 0.0f, 0.0f, 15.0f};
  EXPECT_EQ(RunModel(*model, **kernels), expected);

  absl::StatusOr<int> fused = fuselage::FusePatterns(*model, *matcher);
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 1);
  ASSERT_TRUE(model->Verify().ok());
  // The fused node takes the conv's name, the root's args and then the extra input.
  EXPECT_EQ(fuselage::PrintCode(*model),
            "def forward(self, x, s):\n"
            "    conv = self.conv(x, s)\n"
            "    return conv\n");
  const Module* module = model->FindModule("conv");
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->type().name(), "user.ConvMulReLU2d");
  EXPECT_EQ(module->FindChild("0")->type().name(), "nn.Conv2d");
  EXPECT_EQ(module->FindChild("1")->type().name(), "nn.ReLU");
  EXPECT_EQ(RunModel(*model, **kernels), expected);
}

}  // namespace
