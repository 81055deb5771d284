#version 450
/* softmax.comp — softmax cross-entropy per sample: loss[s] = lse(l) - l[y],
 * dlogits[s][c] = (softmax(l)[c] - [c == y]) · inv_n (the batch mean's
 * gradient). Labels stay on the device as packed u8. */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer Logits { float logits[]; };
layout(std430, set = 0, binding = 1) readonly buffer Labels { uint labels[]; };
layout(std430, set = 0, binding = 2) readonly buffer Indices { uint indices[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { float dst[]; };

layout(push_constant) uniform Push {
  uint n, logits_off, dl_off, loss_off;
  float inv_n;
} p;

void main ()
{
  const uint s = gl_GlobalInvocationID.x;
  if (s >= p.n)
    return;
  const uint idx = indices[s];
  const uint y = (labels[idx >> 2] >> ((idx & 3u) * 8u)) & 255u;
  float l[10];
  float mx = -3.402823466e38;
  for (uint c = 0u; c < 10u; c++)
    {
      l[c] = logits[p.logits_off + s * 10u + c];
      mx = max (mx, l[c]);
    }
  float sum = 0.0;
  for (uint c = 0u; c < 10u; c++)
    {
      l[c] = l[c] - mx;
      sum += exp (l[c]);
    }
  dst[p.loss_off + s] = log (sum) - l[y];
  const float inv_s = p.inv_n / sum;
  for (uint c = 0u; c < 10u; c++)
    dst[p.dl_off + s * 10u + c] = exp (l[c]) * inv_s - (c == y ? p.inv_n : 0.0);
}
