#version 450
/* gather.comp — x[s][p] = image(indices[s])[p] / 255 from the training set
 * kept on the device as packed u8 (196 words per 28×28 image). */
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Images { uint images[]; };
layout(std430, set = 0, binding = 1) readonly buffer Indices { uint indices[]; };
layout(std430, set = 0, binding = 2) writeonly buffer X { float x[]; };

layout(push_constant) uniform Push {
  uint n, x_off;
} p;

void main ()
{
  const uint total = p.n * 196u;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += gl_NumWorkGroups.x * 256u)
    {
      const uint s = id / 196u, w = id % 196u;
      const uint v = images[indices[s] * 196u + w];
      const uint o = p.x_off + s * 784u + w * 4u;
      x[o + 0u] = float (v & 255u) * (1.0 / 255.0);
      x[o + 1u] = float ((v >> 8) & 255u) * (1.0 / 255.0);
      x[o + 2u] = float ((v >> 16) & 255u) * (1.0 / 255.0);
      x[o + 3u] = float (v >> 24) * (1.0 / 255.0);
    }
}
