// Builds the `idemkit` npm package into wasm/pkg/: `npm --prefix wasm run build`.
//
// Works on a fresh clone: it installs what is missing (the npm dev dependencies, the
// wasm32 Rust target, and the wasm-bindgen CLI at exactly the version wasm/Cargo.toml
// pins, because the generated glue and the `wasm-bindgen` crate must match) and fails
// loudly on anything it cannot do. Steps:
//
//   cargo build (wasm32, profile wasm-release: release with whole-program LTO) → wasm-bindgen --target web → wasm-opt -Oz (npm binaryen)
//   → refuse any import from `env` → copy the hand-written JS/TS → package.json, README
//   (with the gzipped .wasm size) → link node_modules/idemkit to pkg/ for the tests.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { createHash } from "node:crypto";

const wasmDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const root = join(wasmDir, "..");
const pkg = join(wasmDir, "pkg");
const started = Date.now();

function log(msg) {
  console.log(`[build ${((Date.now() - started) / 1000).toFixed(1)}s] ${msg}`);
}

function run(cmd, args, opts = {}) {
  log(`$ ${cmd} ${args.join(" ")}`);
  execFileSync(cmd, args, { stdio: "inherit", cwd: root, ...opts });
}

function output(cmd, args) {
  try {
    return execFileSync(cmd, args, { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return null;
  }
}

// 1. npm dev dependencies (binaryen's wasm-opt below; the runtimes for the tests).
//    npm records what it installed in node_modules/.package-lock.json: reinstall when
//    that is missing or older than the lockfile.
const installed = join(wasmDir, "node_modules", ".package-lock.json");
if (!existsSync(installed) || statSync(installed).mtimeMs < statSync(join(wasmDir, "package-lock.json")).mtimeMs) {
  run("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: wasmDir });
}

// 2. The wasm32 target.
const targets = output("rustup", ["target", "list", "--installed"]);
if (targets === null) {
  throw new Error("rustup is required to add the wasm32-unknown-unknown target");
}
if (!targets.split("\n").includes("wasm32-unknown-unknown")) {
  run("rustup", ["target", "add", "wasm32-unknown-unknown"]);
}

// 3. wasm-bindgen CLI, exactly the pinned version.
const cargoToml = readFileSync(join(wasmDir, "Cargo.toml"), "utf8");
const pinned = /^wasm-bindgen\s*=\s*\{[^}]*version\s*=\s*"=([0-9.]+)"/m.exec(cargoToml)?.[1];
if (!pinned) {
  throw new Error("wasm/Cargo.toml must pin wasm-bindgen exactly (version = \"=X.Y.Z\")");
}
const bindgenVersion = () => output("wasm-bindgen", ["--version"]);
if (bindgenVersion() !== `wasm-bindgen ${pinned}`) {
  // Not `--locked`: the CLI's lockfile names yanked versions this registry refuses.
  run("cargo", ["install", "wasm-bindgen-cli", "--version", pinned, "--force"]);
  if (bindgenVersion() !== `wasm-bindgen ${pinned}`) {
    throw new Error(`wasm-bindgen ${pinned} was installed but \`wasm-bindgen --version\` says ${bindgenVersion()}: is ~/.cargo/bin on PATH?`);
  }
}

// 4. Compile and generate the glue.
run("cargo", ["build", "--locked", "-p", "idemkit-wasm", "--lib", "--target", "wasm32-unknown-unknown", "--profile", "wasm-release"]);
const targetDir = JSON.parse(output("cargo", ["metadata", "--format-version", "1", "--no-deps"])).target_directory;
const rawWasm = join(targetDir, "wasm32-unknown-unknown", "wasm-release", "idemkit_wasm.wasm");
rmSync(pkg, { recursive: true, force: true });
mkdirSync(pkg);
run("wasm-bindgen", ["--target", "web", "--no-typescript", "--out-dir", pkg, "--out-name", "idemkit_wasm", rawWasm]);

// 5. Optimise for size. The feature flags are those rustc enables by default for wasm32,
//    and SIMD (blake3's wasm32_simd, enabled in Cargo.toml for this target).
//    wasm-opt is the slow step, so its output is cached in the target directory under
//    the hash of its input and flags (same input and flags, same output).
const wasmFile = join(pkg, "idemkit_wasm_bg.wasm");
const wasmOpt = join(wasmDir, "node_modules", "binaryen", "bin", "wasm-opt");
const optCache = join(targetDir, "idemkit-wasm-opt");
const optFlags = [
  "-Oz",
  "--enable-bulk-memory",
  "--enable-sign-ext",
  "--enable-mutable-globals",
  "--enable-nontrapping-float-to-int",
  "--enable-reference-types",
  "--enable-multivalue",
  "--enable-simd",
];
const optKey = createHash("sha256").update(readFileSync(wasmFile)).update(optFlags.join(" ")).digest("hex");
const cached = join(optCache, `${optKey}.wasm`);
if (existsSync(cached)) {
  log("wasm-opt: unchanged input, using the cached output");
  cpSync(cached, wasmFile);
} else {
  run(wasmOpt, [...optFlags, wasmFile, "-o", wasmFile]);
  // Keep only the latest output.
  rmSync(optCache, { recursive: true, force: true });
  mkdirSync(optCache, { recursive: true });
  cpSync(wasmFile, cached);
}

// 6. The module must be self-contained: an import from `env` means some dependency
//    expects a C runtime or a host function no JavaScript runtime provides.
const wasmBytes = readFileSync(wasmFile);
const imports = WebAssembly.Module.imports(new WebAssembly.Module(wasmBytes));
const fromEnv = imports.filter((i) => i.module === "env");
if (fromEnv.length > 0) {
  throw new Error(`the .wasm imports from env: ${fromEnv.map((i) => i.name).join(", ")}`);
}
const foreign = imports.filter((i) => i.module !== "./idemkit_wasm_bg.js" && i.module !== "wbg");
if (foreign.length > 0) {
  throw new Error(`the .wasm imports from unexpected modules: ${JSON.stringify(foreign)}`);
}

// 7. The hand-written package: JS, types, README, package.json.
cpSync(join(wasmDir, "js"), pkg, { recursive: true });
writeFileSync(
  join(pkg, "wasm-base64.js"),
  "// Generated by wasm/scripts/build.mjs: the .wasm, for runtimes that load no files.\n" +
    `export default ${JSON.stringify(wasmBytes.toString("base64"))};\n`,
);
const gzipped = gzipSync(wasmBytes, { level: 9 }).length;
const sizeLine = `${(gzipped / 1024).toFixed(1)} KiB gzipped, ${(wasmBytes.length / 1024).toFixed(1)} KiB raw`;
const readme = readFileSync(join(wasmDir, "README.md"), "utf8").replace("{{WASM_SIZE}}", sizeLine);
if (readme.includes("{{")) throw new Error("README.md has an unfilled placeholder");
writeFileSync(join(pkg, "README.md"), readme);
for (const licence of ["LICENSE-MIT", "LICENSE-APACHE"]) cpSync(join(root, licence), join(pkg, licence));
const version = /^version\s*=\s*"([^"]+)"/m.exec(readFileSync(join(root, "Cargo.toml"), "utf8"))?.[1];
const manifest = JSON.parse(readFileSync(join(wasmDir, "package.template.json"), "utf8"));
manifest.version = version;
manifest.files = readdirSync(pkg).filter((f) => f !== "package.json").sort();
writeFileSync(join(pkg, "package.json"), JSON.stringify(manifest, null, 2) + "\n");

// 8. Tests and examples import the package by its name, as users do.
const link = join(wasmDir, "node_modules", "idemkit");
rmSync(link, { recursive: true, force: true });
symlinkSync("../pkg", link, "dir");

log(`built wasm/pkg: .wasm ${sizeLine}`);
