/* rlx-vk-spirv.h — the compute shaders as SPIR-V words, compiled from
 * the gpu/shaders .comp files by glslc at build time (gpu/meson.build). Included by
 * rlx-vk-pipelines.c only. */
#pragma once

#include <glib.h>

static const guint32 rlx_spv_gemm[] =
#include "gemm.spv.inc"
;
static const guint32 rlx_spv_reduce[] =
#include "reduce.spv.inc"
;
static const guint32 rlx_spv_gather[] =
#include "gather.spv.inc"
;
static const guint32 rlx_spv_softmax[] =
#include "softmax.spv.inc"
;
static const guint32 rlx_spv_conv1[] =
#include "conv1.spv.inc"
;
static const guint32 rlx_spv_maxpool[] =
#include "maxpool.spv.inc"
;
static const guint32 rlx_spv_im2col[] =
#include "im2col.spv.inc"
;
static const guint32 rlx_spv_poolgrad[] =
#include "poolgrad.spv.inc"
;
static const guint32 rlx_spv_cnn1[] =
#include "cnn1.spv.inc"
;
static const guint32 rlx_spv_cnn2[] =
#include "cnn2.spv.inc"
;
static const guint32 rlx_spv_cnn2w[] =
#include "cnn2w.spv.inc"
;
static const guint32 rlx_spv_cnn1w[] =
#include "cnn1w.spv.inc"
;
static const guint32 rlx_spv_gemm_cm[] =
#include "gemm_cm.spv.inc"
  ;
static const guint32 rlx_spv_to_f16[] =
#include "to_f16.spv.inc"
;
static const guint32 rlx_spv_gemm2[] =
#include "gemm2.spv.inc"
;
static const guint32 rlx_spv_wire_sum[] =
#include "wire_sum.spv.inc"
;
static const guint32 rlx_spv_wire_max[] =
#include "wire_max.spv.inc"
;
static const guint32 rlx_spv_wire_quant[] =
#include "wire_quant.spv.inc"
;
static const guint32 rlx_spv_wire_apply[] =
#include "wire_apply.spv.inc"
;
static const guint32 rlx_spv_codes_check[] =
#include "codes_check.spv.inc"
;
static const guint32 rlx_spv_round_acc[] =
#include "round_acc.spv.inc"
;
static const guint32 rlx_spv_round_u[] =
#include "round_u.spv.inc"
;
static const guint32 rlx_spv_round_quant[] =
#include "round_quant.spv.inc"
;
static const guint32 rlx_spv_params_hash[] =
#include "params_hash.spv.inc"
;
static const guint32 rlx_spv_round_lone[] =
#include "round_lone.spv.inc"
;
