/* placeholder */ __global__ void sq_placeholder_half(){}
