/* rlx-wire.h — the frame codec, minifloat formats, dynamic scale, error
 * feedback and byte counters of the cohort wire.
 *
 * Frame: [u32 LE header length][JSON header, space-padded to a multiple of 4]
 *        [payload]
 *
 * At most one float array per message. Its name travels in the header as
 * `_f32`; `_fmt` ("f16", "f8e4m3", "f8e5m2"; absent for f32) and `_scale`
 * (absent for f32) travel beside it, so a receiver needs no configuration.
 * Byte-compatible with rlx-web's cluster-bus.js (shared/seeds): a frame made
 * by the seed's `encode` decodes here to the same values and vice versa.
 *
 * Quantisation (exactly as the seed does it):
 *   maxabs = largest finite |x|;  scale = target / maxabs (double; 1 if 0)
 *   target: f16 1024, f8e4m3 192, f8e5m2 1024
 *   y = (float) ((double) x * scale)
 *   f16 code = round y to f16, nearest-even, overflow → ±Inf, NaN → NaN
 *     (one seed quirk kept for byte compatibility: an exact tie between two
 *      f16 *subnormals* rounds away from zero)
 *   f8 code  = nearest finite f8 value to that f16 value, ties to the even
 *              code, saturating at ±448 (E4M3) / ±57344 (E5M2), NaN → 0x7f.
 *              (E5M2 payloads therefore never hold ±Inf; ±Inf inputs
 *              saturate. A value that rounds to zero is coded as the seed
 *              codes it: 0x00 (+0) when it was negative and non-zero, else
 *              0x80 (−0) — the seed's stable sort puts +0 before −0.)
 *   decode: x = (float) ((double) decode (code) * (1.0 / scale))
 * Frames made here are byte-identical to the seed's for the same message
 * (its JSON.stringify layout of numbers and strings included).
 *
 * Kernels: AVX-512 + F16C, else AVX2 + F16C, when the CPU has them (chosen
 * at run time), else portable C; all give identical bits.
 *
 * Thread safety: every function is reentrant; an RlxWireFeedback or
 * RlxWireCounters must not be used from two threads at once, and
 * rlx_wire_force_portable () is for tests and benchmarks.
 */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* ── errors ─────────────────────────────────────────────────────────────── */

#define RLX_WIRE_ERROR (rlx_wire_error_quark ())
GQuark rlx_wire_error_quark (void);

typedef enum {
  RLX_WIRE_ERROR_TRUNCATED,      /* frame shorter than its length fields say  */
  RLX_WIRE_ERROR_TOO_LARGE,      /* frame, header or array over a limit       */
  RLX_WIRE_ERROR_BAD_HEADER,     /* header length/padding/JSON syntax/not obj */
  RLX_WIRE_ERROR_BAD_FIELD,      /* a `_` field missing, of the wrong type, … */
  RLX_WIRE_ERROR_BAD_FORMAT,     /* unknown `_fmt`                            */
  RLX_WIRE_ERROR_BAD_SCALE,      /* `_scale` not a finite positive number     */
  RLX_WIRE_ERROR_BAD_PAYLOAD,    /* payload not a whole number of elements …  */
  RLX_WIRE_ERROR_INVALID_ARGUMENT, /* encode: bad header / field / precision  */
} RlxWireError;

/* ── precisions ─────────────────────────────────────────────────────────── */

typedef enum {
  RLX_PRECISION_F32 = 0,
  RLX_PRECISION_F16,
  RLX_PRECISION_F8E4M3,
  RLX_PRECISION_F8E5M2,
} RlxPrecision;

#define RLX_PRECISION_COUNT 4

/* "f32", "f16", "f8e4m3", "f8e5m2" (never NULL for a valid enum value). */
const char *rlx_precision_to_string   (RlxPrecision p);
/* Parses the names above (case-sensitive). FALSE with a message listing the
 * accepted names when @s is not one of them; @p_out untouched then. */
gboolean    rlx_precision_from_string (const char    *s,
                                       RlxPrecision  *p_out,
                                       GError       **error);
/* Bytes per element on the wire: 4, 2, 1, 1. */
gsize       rlx_precision_element_size (RlxPrecision p);
/* The dynamic scale's target for the largest magnitude (0 for f32). */
double      rlx_precision_target       (RlxPrecision p);

/* ── frames ─────────────────────────────────────────────────────────────── */

/* Decoder limits. Zero in a field means "the default". */
typedef struct {
  gsize max_frame;      /* whole frame, bytes   (default RLX_WIRE_DEFAULT_MAX_FRAME)  */
  gsize max_header;     /* JSON header, bytes   (default RLX_WIRE_DEFAULT_MAX_HEADER) */
  guint max_depth;      /* JSON nesting depth   (default RLX_WIRE_DEFAULT_MAX_DEPTH)  */
} RlxWireLimits;

/* The largest model (mnist-mlp-xl, 1,863,690 params) at f32 is 7.45 MB. */
#define RLX_WIRE_DEFAULT_MAX_FRAME  (16u * 1024u * 1024u)
#define RLX_WIRE_DEFAULT_MAX_HEADER (64u * 1024u)
#define RLX_WIRE_DEFAULT_MAX_DEPTH  32u
/* Longest array field name (`_f32` value) accepted, in bytes. */
#define RLX_WIRE_FIELD_MAX          64

/* Encode one message.
 *   @header: the message's fields (copied; may be NULL = {}); must not contain
 *            `_f32`, `_fmt`, `_scale` or a member named @field.
 *   @values: the float array, or NULL for a message without one (then @n must
 *            be 0). A non-NULL @values with @n == 0 is an empty array.
 *   @field:  the array's name (NULL = "g"); 1..RLX_WIRE_FIELD_MAX bytes of
 *            [A-Za-z0-9_], not starting with '_'.
 * Adds `_f32` (when @values), and `_fmt` + `_scale` (when @p != f32 and n > 0).
 * Returns the frame, or NULL with RLX_WIRE_ERROR_INVALID_ARGUMENT /
 * RLX_WIRE_ERROR_TOO_LARGE (frame over 4 GiB). */
GBytes  *rlx_wire_encode (JsonObject   *header,
                          const float  *values,
                          gsize         n,
                          RlxPrecision  p,
                          const char   *field,
                          GError      **error);

/* A frame whose payload the caller writes (kernels that quantise straight
 * into it, core/rlx-kernels.c): the header is written as rlx_wire_encode
 * would write it for an array @field of @n elements at @p with scale @scale
 * (ignored for f32 and n == 0; @field NULL means no array, then @n must be
 * 0). Returns a g_malloc'd buffer of *@frame_len bytes whose payload starts
 * at *@payload_offset and holds n × element size bytes, uninitialised; wrap
 * it with g_bytes_new_take once written. Filled with rlx_wire_quantize of
 * the same values at rlx_wire_scale_for's scale, the frame is byte-identical
 * to rlx_wire_encode's. NULL with RLX_WIRE_ERROR_INVALID_ARGUMENT as
 * rlx_wire_encode, or for a scale that is not finite and positive. */
guint8  *rlx_wire_frame_alloc (JsonObject   *header,
                               const char   *field,
                               gsize         n,
                               RlxPrecision  p,
                               double        scale,
                               gsize        *frame_len,
                               gsize        *payload_offset,
                               GError      **error);

/* What a decoded frame said about its array. */
typedef struct {
  gboolean     has_values;                    /* `_f32` present              */
  char         field[RLX_WIRE_FIELD_MAX + 1]; /* its name ("" when none)     */
  RlxPrecision precision;                     /* f32 when `_fmt` absent      */
  double       scale;                         /* `_scale`; 1.0 when absent   */
  gsize        n;                             /* elements                    */
  gsize        header_len;                    /* JSON bytes incl. padding    */
  gsize        frame_len;                     /* whole frame, bytes          */
} RlxWireInfo;

/* Decode one frame; validates everything first (see RlxWireError).
 *   @limits:     NULL = defaults.
 *   @header_out: (nullable) the header WITHOUT the `_f32`, `_fmt` and
 *                `_scale` members (like the seed's decode), caller unrefs.
 *   @values_out: (nullable) g_malloc'd array of @n_out floats dequantised to
 *                f32, caller g_free()s; NULL when the frame has no array or
 *                an empty one (check @n_out / rlx_wire_decode_full's info).
 * On failure every out parameter is left NULL/0 and @error says what was
 * wrong with the frame. */
gboolean rlx_wire_decode (GBytes               *frame,
                          const RlxWireLimits  *limits,
                          JsonObject          **header_out,
                          float               **values_out,
                          gsize                *n_out,
                          GError              **error);

/* Like rlx_wire_decode, plus @info_out (nullable) describing the array. */
gboolean rlx_wire_decode_full (GBytes               *frame,
                               const RlxWireLimits  *limits,
                               RlxWireInfo          *info_out,
                               JsonObject          **header_out,
                               float               **values_out,
                               GError              **error);

/* Decode straight into a caller's buffer (no allocation for the array): the
 * frame's array must have exactly @n elements (else RLX_WIRE_ERROR_BAD_PAYLOAD
 * naming both counts) — the receive path for a bucket of known size. */
gboolean rlx_wire_decode_into (GBytes               *frame,
                               const RlxWireLimits  *limits,
                               RlxWireInfo          *info_out,
                               JsonObject          **header_out,
                               float                *dst,
                               gsize                 n,
                               GError              **error);

/* Header JSON helpers with the codec's own strict parser and JS-identical
 * writer: parse @json (a JSON object, @len bytes or -1 for NUL-terminated;
 * NULL with RLX_WIRE_ERROR_BAD_HEADER saying what is wrong) and write an
 * object as one line of JSON, exactly as the frame would carry it. */
JsonObject *rlx_wire_header_parse   (const char *json, gssize len, GError **error);
char       *rlx_wire_header_to_json (JsonObject *header, GError **error);

/* ── quantisation primitives ────────────────────────────────────────────── */

/* What @in becomes after the wire at @p: quantise then dequantise, written to
 * @out (which may alias @in). f32 copies. Returns the scale used (1.0 for f32
 * or when every value is zero or non-finite). */
double   rlx_wire_round_trip (const float *in,
                              float       *out,
                              gsize        n,
                              RlxPrecision p);

/* The scale the encoder would use for @in at @p (1.0 for f32). */
double   rlx_wire_scale_for (const float *in, gsize n, RlxPrecision p);

/* Quantise with a given scale into @codes (n × element size bytes, LE), and
 * dequantise @codes back. f32 copies. Exposed for tests and tools. */
void     rlx_wire_quantize   (const float *in, gsize n, RlxPrecision p,
                              double scale, void *codes);
void     rlx_wire_dequantize (const void *codes, gsize n, RlxPrecision p,
                              double scale, float *out);

/* Scalar conversions (exact, table-free reference semantics). */
guint16  rlx_wire_f16_from_f32     (float x);    /* IEEE RNE, all cases        */
guint16  rlx_wire_f16_from_f32_seed (float x);   /* the wire's (seed) rounding */
float    rlx_wire_f32_from_f16     (guint16 h);
guint8   rlx_wire_f8_from_f16      (guint16 h, RlxPrecision p); /* the bridge  */
float    rlx_wire_f32_from_f8      (guint8 code, RlxPrecision p);

/* Kernel sets, best first: "avx512vbmi" ("avx512" with f8 codes decoded
 * by VBMI table lookup), "avx512" (AVX-512 + F16C), "avx2" (AVX2 + F16C),
 * "portable" (plain C). All give identical bits. The best one the CPU
 * has is used unless RLX_WIRE_PORTABLE=1 or RLX_WIRE_KERNELS=NAME is set in
 * the environment at first use. For tests and benchmarks:
 *   rlx_wire_force_portable (TRUE) → "portable"; (FALSE) → the best set;
 *   rlx_wire_force_kernels (NAME) → NAME, or NULL when this CPU lacks it
 *     (nothing changes then); NULL name → the best set.
 * rlx_wire_simd_path () names the set in use. */
const char *rlx_wire_force_portable (gboolean portable);
const char *rlx_wire_force_kernels  (const char *name);
const char *rlx_wire_simd_path      (void);

/* ── codes: are they finite ─────────────────────────────────────────────
 *
 * Codes are a payload's elements at a precision (little-endian, no
 * alignment needed). One that decodes to NaN or ±Inf must never reach a
 * replica: these find it. Any thread. */

/* Whether code @i of @codes (at @p) decodes to NaN or ±Inf. */
gboolean       rlx_wire_code_bad   (const void *codes, gsize i, RlxPrecision p);
/* The masks that find such a code eight bytes at a time, as three
 * little-endian 64-bit words: each element's exponent field, the field's
 * lowest bit, the element's top bit — ((word & field) + one) & top is
 * non-zero exactly when some element of the word has an all-ones field
 * (E4M3: only S.1111.111, its NaN). */
const guint64 *rlx_wire_code_masks (RlxPrecision p);
/* The @n codes at @p of @src copied to @dst (NULL: only checked) and
 * checked in the same pass: the index of the first that decodes to NaN or
 * ±Inf, or -1. @dst holds all @n codes either way. From
 * rlx_par_copy_min_bytes () on (core/util/rlx-par-copy.h) the work is split
 * over that pool's threads; the result is the same. */
gssize         rlx_wire_codes_copy_check (void *dst, const void *src, gsize n,
                                          RlxPrecision p);
/* The same copy without the check (codes checked elsewhere, e.g. on the
 * device that wrote them). */
void           rlx_wire_codes_copy       (void *dst, const void *src, gsize n,
                                          RlxPrecision p);

/* The L2 norm of what the @n codes at @p with @scale decode to (as
 * rlx_wire_dequantize decodes them), summed in double; NaN or ±Inf when a
 * code is not finite. Any thread. */
double         rlx_wire_codes_norm       (const void *codes, gsize n, RlxPrecision p,
                                          double scale);

/* ── error feedback ─────────────────────────────────────────────────────── */

/* Carries the quantisation residual of one stream (a rank's gradient, the
 * leader's update) from one message to the next: each call quantises
 * s = x + residual and keeps residual = s − dequantised(s), so repeated small
 * updates are not lost at f8. Non-finite s carries no residual (reset to 0). */
typedef struct _RlxWireFeedback RlxWireFeedback;

RlxWireFeedback *rlx_wire_feedback_new   (gsize n);
void             rlx_wire_feedback_free  (RlxWireFeedback *fb);
gsize            rlx_wire_feedback_size  (RlxWireFeedback *fb);
void             rlx_wire_feedback_reset (RlxWireFeedback *fb);
/* The current residual (n floats, owned by @fb). */
const float     *rlx_wire_feedback_residual (RlxWireFeedback *fb);

/* s = x + residual; @out = what s becomes after the wire at @p (what every
 * receiver will see); residual = s − @out. @out may alias @x. @n must equal
 * the feedback's size. Returns the scale. */
double   rlx_wire_feedback_apply  (RlxWireFeedback *fb,
                                   const float     *x,
                                   float           *out,
                                   gsize            n,
                                   RlxPrecision     p);

/* The same, producing the frame directly (as rlx_wire_encode with @header and
 * @field); @dequantised_out (nullable, n floats) receives what the receivers
 * will decode. The residual is only updated when the frame is returned. */
GBytes  *rlx_wire_feedback_encode (RlxWireFeedback *fb,
                                   JsonObject      *header,
                                   const float     *x,
                                   gsize            n,
                                   RlxPrecision     p,
                                   const char      *field,
                                   float           *dequantised_out,
                                   GError         **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlxWireFeedback, rlx_wire_feedback_free)

/* ── byte counters ──────────────────────────────────────────────────────── */

/* Plain counters; keep one per link and one total. "f32" bytes are what the
 * same frames would have cost with the array at f32 (frame bytes − payload
 * bytes + 4 × elements). */
typedef struct {
  guint64 tx_frames, tx_bytes, tx_f32_bytes;
  guint64 rx_frames, rx_bytes, rx_f32_bytes;
} RlxWireCounters;

/* f32-equivalent size of a frame of @frame_len bytes carrying @n elements at
 * @p. */
gsize rlx_wire_f32_equivalent (gsize frame_len, gsize n, RlxPrecision p);

/* Add one frame to @link and (when non-NULL) @total. */
void  rlx_wire_counters_add_tx (RlxWireCounters *link, RlxWireCounters *total,
                                gsize frame_len, gsize f32_bytes);
void  rlx_wire_counters_add_rx (RlxWireCounters *link, RlxWireCounters *total,
                                gsize frame_len, gsize f32_bytes);
/* Convenience: from a decoded frame's info. */
void  rlx_wire_counters_add_rx_info (RlxWireCounters *link, RlxWireCounters *total,
                                     const RlxWireInfo *info);
void  rlx_wire_counters_reset  (RlxWireCounters *c);
/* tx_f32_bytes / tx_bytes (1.0 when nothing sent). */
double rlx_wire_counters_tx_ratio (const RlxWireCounters *c);

G_END_DECLS
