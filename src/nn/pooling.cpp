// MaxPool2d.
#include "mixtrain/nn/pooling.h"

namespace mixtrain::nn {

Tensor MaxPool2dImpl::forward(const Tensor& input) {
  return functional::max_pool2d(input, options_.kernel_size(), options_.stride(), options_.padding(),
                                options_.dilation(), options_.ceil_mode());
}

}  // namespace mixtrain::nn
