// A kernel for gencode_test.sh, which checks the architectures cuda_library embeds.
#include <cuda_runtime.h>

__global__ void GencodeTestKernel(float* x) { x[threadIdx.x] *= 2.0f; }
