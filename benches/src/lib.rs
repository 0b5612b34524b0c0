//! Benchmarks of idemkit next to its peers, and the tools behind them.
//!
//! - [`bodies`]: deterministic request bodies (three shapes, three sizes).
//! - [`stats`]: per-operation latency samples and their quantiles.
//! - [`fsync`]: the disk's floor, `write(128 bytes) + fdatasync`.
//! - [`http_overhead`]: one axum handler served bare and behind the idempotency layer.
//! - [`instructions`]: claim + complete a fixed number of times, for callgrind.
//! - [`loadgen`]: the `idemkit-loadgen` clients (redb, SQLite, PostgreSQL, raw fsync).
//! - `pgbench` (feature `postgres`): the PostgreSQL adapter's own statements as
//!   a pgbench script, for pgbench to run beside the loadgen.
//! - [`scale`]: filling a store with many records fast, through the public API.
//!
//! The criterion benchmarks are in `benches/`, the binaries in `src/bin/`, and
//! `scripts/bench-all.sh` runs every figure; `benches/report.py` writes BENCHMARKS.md.

pub mod bodies;
pub mod fsync;
pub mod http_overhead;
pub mod instructions;
pub mod loadgen;
#[cfg(feature = "postgres")]
pub mod pgbench;
pub mod scale;
pub mod stats;
