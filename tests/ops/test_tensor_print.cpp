// Tensor::str() / operator<< against the strings PyTorch prints for the same tensors
// (torch/_tensor_str.py: precision 4, threshold 1000, edgeitems 3, line width 80).
#include <limits>
#include <sstream>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;

namespace {
Tensor floats(const std::vector<float>& v, const mt::Shape& s) { return mt::from_vector(v, s); }
}  // namespace

TEST(TensorPrint, SmallTensorsAsPyTorch) {
  EXPECT_EQ(floats({1, 2, 3, 4}, {2, 2}).str(), "tensor([[1., 2.],\n        [3., 4.]])");
  EXPECT_EQ(floats({0.1f, 2.5f}, {2}).str(), "tensor([0.1000, 2.5000])");
  EXPECT_EQ(floats({-1.5f, 0.25f}, {2}).str(), "tensor([-1.5000,  0.2500])");
  EXPECT_EQ(floats({1e-5f, 1.0f}, {2}).str(), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(floats({0, 0}, {2}).str(), "tensor([0., 0.])");
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(floats({1, nan, inf, -inf}, {4}).str(), "tensor([1., nan, inf, -inf])");
  EXPECT_EQ(mt::arange(8.0).reshape({2, 2, 2}).str(),
            "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])");
  EXPECT_EQ(mt::from_vector(std::vector<int64_t>{1, 22, 333}, {3}).str(), "tensor([  1,  22, 333])");
  EXPECT_EQ(mt::from_vector(std::vector<int64_t>{1, 22, 333}, {3}).to(mt::kInt32).str(),
            "tensor([  1,  22, 333], dtype=torch.int32)");
  EXPECT_EQ(floats({1, 0}, {2}).to(mt::kBool).str(), "tensor([ True, False])");
  EXPECT_EQ(floats({1, 2}, {2}).to(mt::kFloat64).str(), "tensor([1., 2.], dtype=torch.float64)");
  std::ostringstream os;
  os << floats({1, 2}, {2});
  EXPECT_EQ(os.str(), "tensor([1., 2.])");
}

TEST(TensorPrint, HalfTypesZeroDimEmptyAndAutograd) {
  EXPECT_EQ(floats({1.5f, 2}, {2}).to(mt::kFloat16).str(), "tensor([1.5000, 2.0000], dtype=torch.float16)");
  // 0.1 in bf16 is 0.10009765625: printed from the widened value, as PyTorch does.
  EXPECT_EQ(floats({0.1f, 3}, {2}).to(mt::kBFloat16).str(), "tensor([0.1001, 3.0000], dtype=torch.bfloat16)");
  EXPECT_EQ(mt::scalar_tensor(3.0).str(), "tensor(3.)");
  EXPECT_EQ(mt::scalar_tensor(0.5).str(), "tensor(0.5000)");
  EXPECT_EQ(mt::scalar_tensor(7.0, mt::kInt64).str(), "tensor(7)");
  EXPECT_EQ(mt::zeros({0}).str(), "tensor([])");
  EXPECT_EQ(mt::zeros({0, 3}).str(), "tensor([], size=(0, 3))");
  EXPECT_EQ(mt::zeros({0}, mt::kInt64).str(), "tensor([], dtype=torch.int64)");
  Tensor w = mt::ones({2}).requires_grad_();
  EXPECT_EQ(w.str(), "tensor([1., 1.], requires_grad=True)");
  const std::string y = (w * 2.0).str();
  EXPECT_EQ(y.rfind("tensor([2., 2.], grad_fn=<", 0), 0u) << y;
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");
  EXPECT_EQ(floats({1, 2}, {2}).summary(), "Tensor[2] float32 cpu");
}

TEST(TensorPrint, BigTensorsAreSummarised) {
  EXPECT_EQ(mt::arange(2000.0).str(),
            "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n        1.9990e+03])");
  const std::string row = "[1., 1., 1.,  ..., 1., 1., 1.]";
  const std::string pad = ",\n        ";
  EXPECT_EQ(mt::ones({40, 30}).str(), "tensor([" + row + pad + row + pad + row + pad + "..." + pad + row + pad + row +
                                          pad + row + "])");
  // At the threshold nothing is summarised; a long row wraps at the line width.
  const std::string s = mt::ones({1000}).str();
  EXPECT_EQ(s.find("..."), std::string::npos);
  // "1." is 2 wide, so (80 - 7) / (2 + 2) = 18 elements a line.
  std::string first = "tensor([";
  for (int i = 0; i < 17; ++i) first += "1., ";
  EXPECT_EQ(s.substr(0, first.size() + 4), first + "1.,\n");
  mt::PrintOptions o = mt::printoptions();
  mt::set_printoptions({2, 4, 1, 80});
  EXPECT_EQ(floats({0.125f, 1, 2, 3, 4}, {5}).str(), "tensor([0.12,  ..., 4.00])");
  mt::set_printoptions(o);
}

TEST(TensorPrint, DeviceShownWhenNotCpu) {
  if (!mt::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the device suffix is checked on GPU machines";
  EXPECT_EQ(floats({1, 2}, {2}).to(mt::kCUDA).str(), "tensor([1., 2.], device='cuda:0')");
}
