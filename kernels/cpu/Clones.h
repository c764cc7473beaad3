// The inner loops of the elementwise, softmax, normalization and attention kernels are built for x86-64-v4
// (AVX-512) and v3 (AVX2) besides the baseline, and the loader picks the best the CPU has (GCC's
// target_clones): a release binary runs anywhere and still uses wide vectors; ONNX Runtime's MLAS dispatches
// the same way. FMA contraction stays off, so only the order of vectorized sums can differ between CPUs.
#ifndef TEC_KERNELS_CPU_CLONES_H
#define TEC_KERNELS_CPU_CLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TEC_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TEC_CPU_CLONES
#endif

// On a lambda that a cloned loop calls per element: inlined there, so that its math is built for the clone's
// ISA. Left outlined, GCC builds it for the baseline, where each fmaf is a libm call (a bias-less Linear +
// GELU's epilogue ran 60x slower so).
#define TEC_PER_ELEMENT __attribute__((always_inline))

#endif
