// rewind cpu: compiling a stretch of code for a wider vector unit than the build targets, for the
// kernels that carry copies chosen at run time (exact.hpp, thin_gemm.hpp). GCC and clang each
// have their own spelling: GCC a target pragma over the stretch, clang a target attribute on every
// function declared in it (lambdas and templates too). Neither defines __AVX2__ or __AVX512F__
// inside the stretch, so the kernels say which copy they are with a macro of their own.
//
//   REWIND_TARGET_PUSH("avx2,fma")   ... the copy ...   REWIND_TARGET_POP
#pragma once

#if !defined(__CUDACC__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define REWIND_TARGET_COPIES 1
#define REWIND_TARGET_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define REWIND_TARGET_PUSH(features) REWIND_TARGET_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define REWIND_TARGET_POP REWIND_TARGET_PRAGMA(clang attribute pop)
#else
#define REWIND_TARGET_PUSH(features) REWIND_TARGET_PRAGMA(GCC push_options) REWIND_TARGET_PRAGMA(GCC target(features))
#define REWIND_TARGET_POP REWIND_TARGET_PRAGMA(GCC pop_options)
#endif
#endif
