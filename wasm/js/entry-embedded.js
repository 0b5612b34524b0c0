// Deno and any other runtime: the .wasm is embedded as base64, so loading needs no
// file or network permission (Deno runs without --allow-read).
import { initSync } from "./idemkit_wasm.js";
import base64 from "./wasm-base64.js";

const binary = atob(base64);
const bytes = new Uint8Array(binary.length);
for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
initSync({ module: bytes });

export * from "./index.js";
