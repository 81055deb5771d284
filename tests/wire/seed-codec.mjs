// seed-codec.mjs — runs the seed's own wire codec (shared/seeds/cluster-bus.js)
// under Node.js for the interop tests and the benchmark. The seed is loaded
// read-only from $RLX_SHARED_DIR, as an ES module from a data: URL (its
// top level touches no browser global; BroadcastChannel and friends are only
// reached inside functions we never call).
//
//   node seed-codec.mjs encode DIR   every DIR/NAME.f32 (+ NAME.json header,
//                                    NAME.field) → NAME.PREC.seed.frame and
//                                    NAME.PREC.seed.rt.f32 (the seed's decode
//                                    of its own frame), for every precision
//   node seed-codec.mjs decode DIR   every DIR/*.c.frame → *.c.frame.node.f32
//                                    (values) + *.c.frame.node.json (header)
//   node seed-codec.mjs bridge DIR   the seed's f16→f8 maps → DIR/f8e4m3.bridge …
//   node seed-codec.mjs bench N REPS GB/s of the seed's encode/decode on N
//                                    floats, median of REPS; one JSON line
import { readFileSync, writeFileSync, readdirSync, existsSync } from "node:fs";
import { join } from "node:path";

const shared = process.env.RLX_SHARED_DIR;
if (!shared) {
  console.error("seed-codec: set RLX_SHARED_DIR to the folder holding seeds/cluster-bus.js");
  process.exit(2);
}
const seedPath = join(shared, "seeds", "cluster-bus.js");
// One line is appended in memory (the file is never touched): an export of
// the seed's private f16→f8 `bridge`, so the tests can compare all 65,536
// entries with ours.
const src = readFileSync(seedPath, "utf8") + "\nexport { bridge as __bridge };\n";
const bus = await import("data:text/javascript;base64," + Buffer.from(src).toString("base64"));

const PRECISIONS = ["f32", "f16", "f8e4m3", "f8e5m2"];

function f32FromFile(path) {
  const b = readFileSync(path);
  const ab = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
  return new Float32Array(ab);
}

function writeF32(path, arr) {
  writeFileSync(path, Buffer.from(arr.buffer, arr.byteOffset, arr.byteLength));
}

function bufOf(path) {
  const b = readFileSync(path);
  return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
}

const [cmd, ...args] = process.argv.slice(2);

if (cmd === "encode") {
  const dir = args[0];
  for (const name of readdirSync(dir).filter((f) => /^[^.]+\.f32$/.test(f))) {
    const stem = name.slice(0, -4);
    const header = existsSync(join(dir, stem + ".json"))
      ? JSON.parse(readFileSync(join(dir, stem + ".json"), "utf8"))
      : { t: "grad" };
    const field = existsSync(join(dir, stem + ".field"))
      ? readFileSync(join(dir, stem + ".field"), "utf8").trim()
      : "g";
    const values = f32FromFile(join(dir, name));
    for (const p of PRECISIONS) {
      const msg = { ...header, [field]: values };
      const frame = bus.encode(msg, { precision: p });
      writeFileSync(join(dir, `${stem}.${p}.seed.frame`), Buffer.from(frame));
      const back = bus.decode(frame.slice(0));
      writeF32(join(dir, `${stem}.${p}.seed.rt.f32`), back[field]);
    }
  }
} else if (cmd === "decode") {
  const dir = args[0];
  for (const name of readdirSync(dir).filter((f) => f.endsWith(".c.frame"))) {
    const msg = bus.decode(bufOf(join(dir, name)));
    const out = {};
    for (const [k, v] of Object.entries(msg)) {
      if (v instanceof Float32Array) writeF32(join(dir, name + ".node.f32"), v);
      else out[k] = v;
    }
    writeFileSync(join(dir, name + ".node.json"), JSON.stringify(out));
  }
} else if (cmd === "bridge") {
  const dir = args[0];
  for (const id of ["f8e4m3", "f8e5m2"]) {
    const map = bus.__bridge(bus.WIRE_FORMATS[id]);
    writeFileSync(join(dir, `${id}.bridge`), Buffer.from(map));
  }
} else if (cmd === "bench") {
  const n = Number(args[0] ?? 100000);
  const reps = Number(args[1] ?? 5);
  // Gradient-like values: normal-ish, a few decades of magnitude.
  const values = new Float32Array(n);
  let s = 12345;
  // the same generator and arithmetic as `rlx-rank wire bench` (uint32 LCG)
  const rnd = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 4294967296);
  for (let i = 0; i < n; i++) values[i] = (rnd() - 0.5) * 1e-3 * (1 + 10 * rnd());
  let sum = 0;
  for (let i = 0; i < n; i++) sum += values[i];
  const out = { n, bytes: n * 4, sum };
  const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
  const timeIt = (fn) => {
    const minTime = 0.05; // seconds per sample
    let iters = 1;
    for (;;) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < iters; i++) fn();
      const dt = Number(process.hrtime.bigint() - t0) / 1e9;
      if (dt >= minTime) return dt / iters;
      iters *= 2;
    }
  };
  for (const p of PRECISIONS) {
    const msg = { t: "grad", step: 1, g: values };
    for (let w = 0; w < 3; w++) bus.encode(msg, { precision: p }); // warm up (tables, JIT)
    const frame = bus.encode(msg, { precision: p });
    const enc = [], dec = [];
    for (let r = 0; r < reps; r++) {
      enc.push(timeIt(() => bus.encode(msg, { precision: p })));
      // decode mutates nothing, but f32 decode returns a view: copy to match
      // the f16/f8 paths, which produce a fresh Float32Array.
      dec.push(timeIt(() => {
        const m = bus.decode(frame);
        return p === "f32" ? new Float32Array(m.g) : m.g;
      }));
    }
    out[p] = { encode_gbs: (n * 4) / median(enc) / 1e9, decode_gbs: (n * 4) / median(dec) / 1e9 };
  }
  console.log(JSON.stringify(out));
} else {
  console.error("usage: seed-codec.mjs encode|decode|bridge DIR | bench N REPS");
  process.exit(2);
}
