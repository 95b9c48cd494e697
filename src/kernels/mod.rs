//! Kernels, one module per op family.
