// Cloudflare Workers (workerd): a `.wasm` import is a compiled WebAssembly.Module
// (Wrangler and Miniflare load it as a CompiledWasm module); code generation from
// bytes at run time is not allowed there.
import wasmModule from "./idemkit_wasm_bg.wasm";
import { initSync } from "./idemkit_wasm.js";

initSync({ module: wasmModule });

export * from "./index.js";
