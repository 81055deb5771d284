/* wire-layout.h — word offsets shared by the wire shaders (wire*.comp) and
 * the trainer's files (gpu/rlx-vk-trainer-private.h); plain #defines so that both C and GLSL read it. */
#ifndef RLX_WIRE_LAYOUT_H
#define RLX_WIRE_LAYOUT_H

/* precisions, numbered as RlxPrecision (core/wire/rlx-wire.h) */
#define WIRE_F32    0
#define WIRE_F16    1
#define WIRE_E4M3   2
#define WIRE_E5M2   3

/* the control buffer (host-written before each submission), in uints */
#define CTL_INV_LO        0   /* apply: 1 / scale of the pending update, double */
#define CTL_INV_HI        1
#define CTL_POISON_INDEX  2   /* tests: element replaced in the gradient (~0: none) */
#define CTL_POISON_BITS   3
#define CTL_USE_RESIDUAL  4   /* 0: the residual counts as zero (after a reset) */
#define CTL_DIV_NUDGE     5   /* tests: start each division this many ulps off (int) */
#define CTL_RES_IN        6   /* the residual the pass reads: word offset in the residual buffer */
#define CTL_RES_OUT       7   /* where it writes the new one (the other half: kept until accepted) */
#define CTL_ROUND_PREC    8   /* the leader's round: the update's precision */
#define CTL_ROUND_FEEDBACK 9  /* the update residual is kept (never at f32) and added (1),
                               * or zeros are added (2: after a reset) */
#define CTL_COEF          10  /* u = coef · x (+ residual): f32 bits */
#define CTL_OWN_WEIGHT    11  /* the own gradient's weight in the round's sum, f32 bits */
#define CTL_TARGET        12  /* 12..15: the scale's target by precision */
#define CTL_POISON_AHEAD  16  /* 16..19: tests: the poison (index, bits) of the gradient whose
                               * check an update made ahead in slot 0, 1 folds in */
#define CTL_WORDS         20

/* the pass's summary, at meta_off in the wire scratch buffer, in uints */
#define META_SMAX      0   /* largest |s| as f32 bits (≥ 0x7f800000: NaN/Inf) */
#define META_GMAX      1   /* largest |g| likewise */
#define META_BAD       2   /* first element whose s is not finite (~0: none) */
#define META_LOSS      3   /* the step's mean loss, f32 bits */
#define META_SCALE_LO  4   /* the scale, double */
#define META_SCALE_HI  5
#define META_INV_LO    6   /* 1 / scale, double */
#define META_INV_HI    7
#define META_BAD_BITS  8   /* s at META_BAD, f32 bits */
#define META_HASH_LO   9   /* params_hash: the replica's hash (rlx_params_hash) */
#define META_HASH_HI   10
#define META_WORDS     12

/* a member's bucket in the round (a slot buffer, host-written): its codes,
 * then these words at the slot's param_off */
#define SLOT_PREC      0
#define SLOT_INV_LO    1   /* 1 / scale, double */
#define SLOT_INV_HI    2
#define SLOT_WEIGHT    3   /* f32 bits */
#define SLOT_WORDS     4

/* the parameter hash (core/vision/rlx-model.h): elements a chunk
 * (RLX_PARAMS_HASH_CHUNK), chunks a workgroup of params_hash */
#define HASH_CHUNK            1024u
#define HASH_CHUNKS_PER_GROUP 64u

/* the tables buffer, in uints: the f16 → f8 bridges (4 codes a word) and
 * the f8 values as f32 bits */
#define TAB_BRIDGE_E4M3  0
#define TAB_BRIDGE_E5M2  16384
#define TAB_F8_E4M3      32768
#define TAB_F8_E5M2      33024
#define TAB_WORDS        33280

/* partial maxima: 3 words for each workgroup of wire_sum */
#define WIRE_MAX_GROUPS  1024

#endif
