// The attention family on CUDA: no fused kernel yet. scaled_dot_product_attention asks
// backends::attention_forward.has(device) and keeps its composite (cuBLASLt GEMMs and the softmax
// kernels) where, as here, nothing is registered.
namespace mixtrain::backends::cuda {

void register_attention() {}

}  // namespace mixtrain::backends::cuda
