/* rlx-fp-mode.h — which floating-point mode each thread computes in
 *
 * Two modes (docs/ARCHITECTURE.md, "Floating-point modes"):
 *
 *   fast   flush-to-zero and denormals-are-zero (x86 MXCSR bits 15 and 6):
 *          a subnormal result is 0, a subnormal operand counts as 0. For a
 *          rank's own training and evaluation arithmetic — forward,
 *          backward, the inner SGD, the pseudo-gradient, OpenBLAS's GEMMs,
 *          the test-set evaluation — whose results stay on that rank. On
 *          synthetic data the loss reaches 0 and values decay into
 *          subnormals, which x86 computes 5–7× slower (issue 28).
 *   exact  IEEE 754, subnormals kept (the C default). For the arithmetic
 *          that every replica repeats and must agree on bit for bit, a
 *          Vulkan replica included: the round kernels (core/rlx-kernels.h:
 *          sum, update, quantise, apply, hash), the wire codec
 *          (core/wire) and the outer round's arithmetic (core/cohort/
 *          rlx-outer.h). The Vulkan shaders reproduce exactly that IEEE
 *          arithmetic in integer code (gpu/shaders/wire.glsl): lavapipe
 *          offers neither shaderDenormPreserveFloat32 nor
 *          shaderDenormFlushToZeroFloat32, so no SPIR-V float-controls mode
 *          could make a device flush the way the CPU does.
 *
 * The mode is per thread and a new thread copies its creator's, which
 * nothing here relies on: each thread function that computes starts with
 * rlx_fp_mode_enter_fast () or _exact (), each GTask thread function goes
 * through rlx_fp_task_run_in_thread (GLib's pool threads are made by GLib,
 * with whatever mode), and each exact section entered from a fast thread is
 * an RlxFpScope. OpenBLAS's pool threads are made when it is loaded or
 * resized, with the loading thread's mode (this Debian build has no
 * CONSISTENT_FPCSR), so core/vision/rlx-blas.c does both in fast scopes.
 *
 * Off x86 (no SSE) every function here does nothing: the platform's
 * default mode is used everywhere, which is exact.
 *
 * Threads: every function acts on the calling thread only.
 */
#pragma once

#include <gio/gio.h>

#if defined(__SSE__) && (defined(__x86_64__) || defined(__i386__))
#include <xmmintrin.h>
#define RLX_FP_MODE_BITS 0x8040u   /* FTZ (bit 15) | DAZ (bit 6) */
#define RLX_FP_HAVE_MODE 1
#else
#define RLX_FP_HAVE_MODE 0
#endif

G_BEGIN_DECLS

typedef struct {
  unsigned int saved;
} RlxFpScope;

static inline void
rlx_fp_mode_enter_fast (void)
{
#if RLX_FP_HAVE_MODE
  _mm_setcsr (_mm_getcsr () | RLX_FP_MODE_BITS);
#endif
}

static inline void
rlx_fp_mode_enter_exact (void)
{
#if RLX_FP_HAVE_MODE
  _mm_setcsr (_mm_getcsr () & ~RLX_FP_MODE_BITS);
#endif
}

/* TRUE when the calling thread is in the fast mode. */
static inline gboolean
rlx_fp_mode_is_fast (void)
{
#if RLX_FP_HAVE_MODE
  return (_mm_getcsr () & RLX_FP_MODE_BITS) == RLX_FP_MODE_BITS;
#else
  return FALSE;
#endif
}

/* A section in one mode, whatever the thread's: begin, compute, end. */
static inline RlxFpScope
rlx_fp_scope_begin_exact (void)
{
  RlxFpScope s = { 0 };
#if RLX_FP_HAVE_MODE
  s.saved = _mm_getcsr ();
  if (s.saved & RLX_FP_MODE_BITS)
    _mm_setcsr (s.saved & ~RLX_FP_MODE_BITS);
#endif
  return s;
}

static inline RlxFpScope
rlx_fp_scope_begin_fast (void)
{
  RlxFpScope s = { 0 };
#if RLX_FP_HAVE_MODE
  s.saved = _mm_getcsr ();
  if ((s.saved & RLX_FP_MODE_BITS) != RLX_FP_MODE_BITS)
    _mm_setcsr (s.saved | RLX_FP_MODE_BITS);
#endif
  return s;
}

static inline void
rlx_fp_scope_end (RlxFpScope s)
{
#if RLX_FP_HAVE_MODE
  if ((_mm_getcsr () & RLX_FP_MODE_BITS) != (s.saved & RLX_FP_MODE_BITS))
    _mm_setcsr (s.saved);
#else
  (void) s;
#endif
}

/* g_task_run_in_thread with @func run in the fast mode (and the pool
 * thread's own mode restored after it). */
void rlx_fp_task_run_in_thread (GTask *task, GTaskThreadFunc func);

G_END_DECLS
