#version 450
/* to_f16.comp — --compute f16: an operand of the tensor-core GEMMs
 * (gemm_cm.comp) rounded to f16 once, where it is made, instead of by
 * every GEMM that reads it: dst[dst_off + i] = f16 (src[src_off + i] ×
 * scale) for i < count, with the very conversion gemm_cm.comp would make
 * (the scale a power of two: the loss scaling of a gradient, or 1).
 * count, src_off a multiple of 8 and 4, dst_off (in halves) of 8 (the host
 * checks): each thread turns 8 floats (two 16-byte reads) into one 16-byte
 * write, striding over the grid. */
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Src { vec4 src4[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Dst { uvec4 dst8[]; };

layout(push_constant) uniform Push {
  uint count, src_off, dst_off;
  float scale;
} p;

void main ()
{
  const uint chunks = p.count / 8u;
  const uint stride = gl_NumWorkGroups.x * 256u;

  for (uint i = gl_GlobalInvocationID.x; i < chunks; i += stride)
    {
      const vec4 lo = src4[p.src_off / 4u + 2u * i] * p.scale;
      const vec4 hi = src4[p.src_off / 4u + 2u * i + 1u] * p.scale;
      dst8[p.dst_off / 8u + i] = uvec4 (packFloat2x16 (f16vec2 (lo.xy)), packFloat2x16 (f16vec2 (lo.zw)),
                                        packFloat2x16 (f16vec2 (hi.xy)), packFloat2x16 (f16vec2 (hi.zw)));
    }
}
