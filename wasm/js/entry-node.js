// Node.js and Bun: read the .wasm next to this file (no permissions involved) and
// instantiate it synchronously, so `import { ... } from "idemkit"` needs no init call.
import { readFileSync } from "node:fs";
import { initSync } from "./idemkit_wasm.js";

initSync({ module: readFileSync(new URL("./idemkit_wasm_bg.wasm", import.meta.url)) });

export * from "./index.js";
