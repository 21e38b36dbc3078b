// KernelRegistry: registration rules and the quantized-overload selection.
#include "runtime/kernel_registry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/builtin_kernels.h"
#include "runtime/float_kernels.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;

FunctionKernel Returns(int64_t tag) {
  return [tag](const KernelContext&, absl::Span<const Value>, const ValueKwargs&) {
    return absl::StatusOr<Value>(Value::Int(tag));
  };
}

ModuleKernel ModuleReturns(int64_t tag) {
  return [tag](const KernelContext&, const Module&, absl::Span<const Value>, const ValueKwargs&) {
    return absl::StatusOr<Value>(Value::Int(tag));
  };
}

TEST(KernelRegistryTest, DuplicatesAreAlreadyExists) {
  KernelRegistry r;
  ASSERT_TRUE(r.RegisterFunction(OpKind::kCallFunction, "test.f", Returns(1)).ok());
  EXPECT_EQ(r.RegisterFunction(OpKind::kCallFunction, "test.f", Returns(2)).code(),
            absl::StatusCode::kAlreadyExists);
  // The same name as a method is a different key.
  EXPECT_TRUE(r.RegisterFunction(OpKind::kCallMethod, "test.f", Returns(3)).ok());
  ASSERT_TRUE(r.RegisterModule("test.M", ModuleReturns(4)).ok());
  auto dup = r.RegisterModule("test.M", ModuleReturns(5));
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(dup.message(), HasSubstr("test.M"));
}

TEST(KernelRegistryTest, BadRegistrationsAreInvalidArgument) {
  KernelRegistry r;
  EXPECT_EQ(r.RegisterFunction(OpKind::kCallModule, "x", Returns(1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.RegisterFunction(OpKind::kCallFunction, "x", FunctionKernel()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.RegisterModule(Symbol(), ModuleReturns(1)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KernelRegistryTest, QuantizedOverloadRunsOnlyForQuantizedFirstTensor) {
  KernelRegistry r;
  const Symbol target = Symbol::Intern("test.pool");
  ASSERT_TRUE(r.RegisterFunction(OpKind::kCallFunction, target, Returns(1)).ok());
  ASSERT_TRUE(r.RegisterQuantizedFunctionOverload(OpKind::kCallFunction, target, Returns(2)).ok());
  EXPECT_EQ(r.RegisterQuantizedFunctionOverload(OpKind::kCallFunction, target, Returns(3)).code(),
            absl::StatusCode::kAlreadyExists);
  const Value float_arg = Tensor::FromFloats({1}, {1});
  const Value quant_arg = *Tensor::Zeros(DType::kQUInt8, {1}, QuantParams::PerTensor(1, 0));
  GraphModule gm;
  const KernelContext ctx{**gm.graph().AddPlaceholder("x"), gm, r};
  auto call = [&](std::vector<Value> args) {
    const FunctionKernel* k = r.SelectFunction(OpKind::kCallFunction, target, args);
    return (*k)(ctx, args, {})->as_int();
  };
  EXPECT_EQ(call({float_arg}), 1);
  EXPECT_EQ(call({quant_arg}), 2);
  EXPECT_EQ(call({Value::List({quant_arg, quant_arg})}), 2);  // cat's list of tensors
  EXPECT_EQ(call({}), 1);

  const Symbol type = Symbol::Intern("test.QOnly");
  ASSERT_TRUE(r.RegisterQuantizedModuleOverload(type, ModuleReturns(7)).ok());
  const Module module(type.name());
  EXPECT_EQ(r.SelectModule(module, {float_arg}), nullptr);
  EXPECT_NE(r.SelectModule(module, {quant_arg}), nullptr);
}

TEST(KernelRegistryTest, RegisterFloatKernelsIsAllOrNothing) {
  KernelRegistry r;
  ASSERT_TRUE(r.RegisterFunction(OpKind::kCallMethod, "view", Returns(1)).ok());
  auto status = RegisterFloatKernels(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(), HasSubstr("view"));
  EXPECT_EQ(r.FindModule(Symbol::Intern("nn.Conv2d")), nullptr);

  KernelRegistry fresh;
  ASSERT_TRUE(RegisterFloatKernels(fresh).ok());
  EXPECT_NE(fresh.FindModule(Symbol::Intern("nn.Conv2d")), nullptr);
  EXPECT_NE(fresh.FindFunction(OpKind::kCallFunction, Symbol::Intern("operator.getitem")), nullptr);
  EXPECT_EQ(RegisterFloatKernels(fresh).code(), absl::StatusCode::kAlreadyExists);
}

TEST(KernelRegistryTest, BuiltinKernelsHoldFloatKernelsAndQuantizedOverloads) {
  auto kernels = BuiltinKernels();
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  const Module max_pool("nn.MaxPool2d");
  const Value float_arg = Tensor::FromFloats({1, 1, 1, 1}, {1});
  const Value quant_arg =
      *Tensor::Zeros(DType::kQUInt8, {1, 1, 1, 1}, QuantParams::PerTensor(1, 0));
  const ModuleKernel* for_float = (*kernels)->SelectModule(max_pool, {float_arg});
  const ModuleKernel* for_quant = (*kernels)->SelectModule(max_pool, {quant_arg});
  ASSERT_NE(for_float, nullptr);
  ASSERT_NE(for_quant, nullptr);
  EXPECT_NE(for_float, for_quant);
  EXPECT_NE((*kernels)->FindModule(Symbol::Intern("nnq.Conv2d")), nullptr);
}

}  // namespace
}  // namespace fuselage
