// Display names of kernels in one table never coincide (issue 14): real kernel names of the ResNet-50 sample.
#include <gtest/gtest.h>

#include <set>

#include "trace/trace.h"

namespace gm::trace {
namespace {

TEST(TraceShortNames, KernelsThatShortenAlikeKeepTheirDistinguishingArgument) {
  const std::vector<std::string> names = {
      "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, "
      "at::detail::Array<char*, 3> "
      ">(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)",
      "void at::native::vectorized_elementwise_kernel<4, at::native::MulScalarFunctor<float, float>, "
      "at::detail::Array<char*, 2> >(int, at::native::MulScalarFunctor<float, float>, "
      "at::detail::Array<char*, 2>)",
      "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
      "namespace)::clamp_min_scalar_kernel_impl(at::TensorIterator&, "
      "c10::Scalar)::{lambda()#1}::operator()() "
      "const::{lambda()#8}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
      "at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl(at::TensorIterator&, "
      "c10::Scalar)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::{lambda(float)#1}, "
      "at::detail::Array<char*, 2>)",
      "volta_sgemm_128x64_nn",
      "void foo<int>(int)",
      "void foo<int>(float)"};
  const auto shown = short_names(names, 60);
  ASSERT_EQ(shown.size(), names.size());
  EXPECT_EQ(std::set<std::string>(shown.begin(), shown.end()).size(), names.size());
  EXPECT_EQ(shown[0], "vectorized_elementwise_kernel<…, AddFunctor<float>, …>");
  EXPECT_EQ(shown[1], "…ed_elementwise_kernel<…, MulScalarFunctor<float, float>, …>");
  EXPECT_EQ(shown[2], "…ized_elementwise_kernel<…, clamp_min_scalar_kernel_impl, …>");
  EXPECT_EQ(shown[3], "volta_sgemm_128x64_nn");  // unique names keep their usual short form
  EXPECT_EQ(shown[4], "foo<…> #1");              // alike up to the parameters: numbered
  EXPECT_EQ(shown[5], "foo<…> #2");
  for (const auto& s : shown) {
    std::size_t chars = 0;
    for (char c : s) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    EXPECT_LE(chars, 60u) << s;
  }
}

}  // namespace
}  // namespace gm::trace
