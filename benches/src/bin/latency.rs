//! `idemkit-latency`: per-operation latency figures (p50/p99), one JSON object each.
//!
//! - `durable`: claim + complete on a temp redb file, next to the raw
//!   `write(128 B) + fdatasync` of the same disk, interleaved in rounds.
//! - `scale --records N`: the same claim latency on a store already holding N records.
//! - `gc --records N`: GC throughput while clients keep claiming.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use idemkit::clock::{ManualClock, SystemClock};
use idemkit::core::machine::Policy;
use idemkit::core::record::EffectKind;
use idemkit::store::{Claim, Store};
use idemkit::{IdempotencyKey, UnixMillis};
use idemkit_benches::fsync::{Mode, RawLog};
use idemkit_benches::scale::{self, fingerprint, response};
use idemkit_benches::stats::{Latencies, round2};
use serde_json::json;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser, Debug)]
#[command(
    name = "idemkit-latency",
    about = "Latency figures of the redb store, as JSON"
)]
struct Cli {
    /// Where the temp files go (a fresh subdirectory, removed after).
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    figure: Figure,
}

#[derive(Subcommand, Debug)]
enum Figure {
    /// Durable claim + complete vs. raw fdatasync, interleaved.
    Durable {
        /// Operations of each kind.
        #[arg(long, default_value_t = 2000)]
        ops: usize,
    },
    /// Claim latency on stores already holding `--records` records, each
    /// (`--records 10000 --records 10000000`), probed op by op in turn.
    Scale {
        /// Records in a store before measuring (repeat for several stores).
        #[arg(long, required = true, num_args = 1..)]
        records: Vec<u64>,
        /// Measured claims (each followed by its complete).
        #[arg(long, default_value_t = 1000)]
        ops: usize,
        /// Keep the filled store in this directory and reuse it next time.
        #[arg(long, env = "IDEMKIT_BENCH_CACHE")]
        cache: Option<PathBuf>,
    },
    /// GC throughput while clients keep claiming new keys.
    Gc {
        /// Expired records to collect (env IDEMKIT_BENCH_GC_RECORDS).
        #[arg(long, env = "IDEMKIT_BENCH_GC_RECORDS", default_value_t = 100_000)]
        records: u64,
        /// Claiming clients running during GC.
        #[arg(long, default_value_t = 2)]
        clients: u32,
        /// Records per GC batch (one transaction).
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Seconds of claims measured without GC first (the baseline).
        #[arg(long, default_value_t = 3.0)]
        baseline_seconds: f64,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(v) => {
            println!("{v}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idemkit-latency: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<serde_json::Value, Error> {
    let tmp = match &cli.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            tempfile::Builder::new()
                .prefix("idemkit-latency-")
                .tempdir_in(d)?
        }
        None => tempfile::Builder::new()
            .prefix("idemkit-latency-")
            .tempdir()?,
    };
    let dir = tmp.path();
    let mut out = match &cli.figure {
        Figure::Durable { ops } => durable(dir, *ops)?,
        Figure::Scale {
            records,
            ops,
            cache,
        } => scale_figure(dir, records, *ops, cache.as_deref())?,
        Figure::Gc {
            records,
            clients,
            batch,
            baseline_seconds,
        } => gc_figure(dir, *records, *clients, *batch, *baseline_seconds)?,
    };
    if let Some(obj) = out.as_object_mut() {
        obj.insert(
            "dir".into(),
            json!(dir.parent().map(Path::display).map(|d| d.to_string())),
        );
    }
    Ok(out)
}

/// Latencies of one store in a probe.
#[derive(Default)]
struct StoreProbe {
    claim: Latencies,
    complete: Latencies,
    claim_complete: Latencies,
}

/// Claim + complete of `ops` new keys (prefix `prefix`) on each store, and as many
/// raw appends and overwrites, interleaved op by op (the store order rotates), so
/// every figure sees the same disk conditions.
struct Probe {
    stores: Vec<StoreProbe>,
    fsync_append: Latencies,
    fsync_overwrite: Latencies,
}

fn claim_complete(store: &Store, key: &str, p: Option<&mut StoreProbe>) -> Result<(), Error> {
    let scope = scale::scope();
    let policy = Policy::default().with_effect(EffectKind::Local);
    let key = IdempotencyKey::new(key)?;
    let t0 = Instant::now();
    let claim = store.claim(&scope, &key, fingerprint(), "probe", &policy)?;
    let t1 = Instant::now();
    let Claim::Execute(guard) = claim else {
        return Err(format!("probe claim answered {claim:?}").into());
    };
    guard.complete(response())?;
    let t2 = Instant::now();
    if let Some(p) = p {
        p.claim.record(t1 - t0);
        p.complete.record(t2 - t1);
        p.claim_complete.record(t2 - t0);
    }
    Ok(())
}

fn probe(stores: &[&Store], dir: &Path, prefix: &str, ops: usize) -> Result<Probe, Error> {
    let mut append = RawLog::create(&dir.join("raw-append.log"), Mode::Append)?;
    let mut overwrite = RawLog::create(&dir.join("raw-overwrite.log"), Mode::Overwrite)?;
    let mut p = Probe {
        stores: stores.iter().map(|_| StoreProbe::default()).collect(),
        fsync_append: Latencies::with_capacity(ops),
        fsync_overwrite: Latencies::with_capacity(ops),
    };
    // Warm-up: the first transactions allocate pages, the first appends grow the file.
    for i in 0..20 {
        for store in stores {
            claim_complete(store, &format!("{prefix}-warm-{i}"), None)?;
        }
        append.write_sync()?;
        overwrite.write_sync()?;
    }
    let n = stores.len();
    for i in 0..ops {
        for j in 0..n {
            let k = (i + j) % n;
            if let (Some(store), Some(sp)) = (stores.get(k), p.stores.get_mut(k)) {
                claim_complete(store, &format!("{prefix}-{i}"), Some(sp))?;
            }
        }
        p.fsync_append.merge(append.measure(1)?);
        p.fsync_overwrite.merge(overwrite.measure(1)?);
    }
    Ok(p)
}

fn store_json(p: &mut StoreProbe) -> serde_json::Value {
    json!({
        "claim": p.claim.summary(),
        "complete": p.complete.summary(),
        "claim_complete": p.claim_complete.summary(),
    })
}

fn durable(dir: &Path, ops: usize) -> Result<serde_json::Value, Error> {
    let store = idemkit::open(dir.join("durable.redb"))?;
    let mut p = probe(&[&store], dir, "durable", ops)?;
    let mut v = p
        .stores
        .first_mut()
        .map(store_json)
        .ok_or("no store probed")?;
    v["fsync_append"] = p.fsync_append.summary();
    v["fsync_overwrite"] = p.fsync_overwrite.summary();
    v["io_per_op"] = io_per_op(dir)?;
    v["io_per_op_logged"] = io_per_op_logged(dir)?;
    v["figure"] = json!("durable");
    v["ops"] = json!(ops);
    Ok(v)
}

/// This process's write calls and bytes written so far (`/proc/self/io`:
/// `syscw`, `wchar`), zeros where it cannot be read.
fn process_writes() -> [u64; 2] {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    [field("syscw:"), field("wchar:")]
}

/// Syncs, writes and bytes written per claim and per complete on a store file
/// kept open, the way `durable` measures it (through the write-ahead log):
/// syncs are its commits (one `fdatasync` each, of the log or, at a
/// checkpoint, of redb), writes and bytes the process's write calls, 200 new
/// keys after a warm-up, one thread.
fn io_per_op_logged(dir: &Path) -> Result<serde_json::Value, Error> {
    let adapter = Arc::new(idemkit::adapters::redb::RedbAdapter::open(
        dir.join("counted-logged.redb"),
    )?);
    let store = Store::new(adapter.clone());
    let scope = scale::scope();
    let policy = Policy::default().with_effect(EffectKind::Local);
    let fp = fingerprint();
    let n = 200u64;
    let snapshot = || {
        let [writes, bytes] = process_writes();
        [adapter.commit_stats().commits, writes, bytes]
    };
    let mut claim = [0u64; 3];
    let mut complete = [0u64; 3];
    for i in 0..n + 20 {
        let key = IdempotencyKey::new(&format!("io-{i}"))?;
        let before = snapshot();
        let c = store.claim(&scope, &key, fp, "io", &policy)?;
        let mid = snapshot();
        let Claim::Execute(guard) = c else {
            return Err(format!("io claim answered {c:?}").into());
        };
        guard.complete(response())?;
        let after = snapshot();
        if i >= 20 {
            for k in 0..3 {
                claim[k] += mid[k] - before[k];
                complete[k] += after[k] - mid[k];
            }
        }
    }
    let stats = adapter.commit_stats();
    let per = |a: [u64; 3]| {
        json!({
            "syncs": round2(a[0] as f64 / n as f64),
            "writes": round2(a[1] as f64 / n as f64),
            "bytes": round2(a[2] as f64 / n as f64),
        })
    };
    Ok(json!({
        "claim": per(claim),
        "complete": per(complete),
        "commits": stats.commits,
        "logged": stats.logged,
    }))
}

/// Syncs, writes and bytes written per claim and per complete (a store on a
/// counting backend, 200 new keys after a warm-up): every commit a durable
/// redb commit, as with the write-ahead log off.
fn io_per_op(dir: &Path) -> Result<serde_json::Value, Error> {
    let counts = Arc::new(scale::IoCounts::default());
    let backend = scale::CountingFile::open(&dir.join("counted.redb"), Arc::clone(&counts))?;
    let store = Store::from(idemkit::adapters::redb::RedbAdapter::with_backend(backend)?);
    let scope = scale::scope();
    let policy = Policy::default().with_effect(EffectKind::Local);
    let fp = fingerprint();
    let n = 200u64;
    let snapshot = |c: &scale::IoCounts| {
        [
            c.syncs.load(Ordering::Relaxed),
            c.writes.load(Ordering::Relaxed),
            c.bytes.load(Ordering::Relaxed),
        ]
    };
    let mut claim = [0u64; 3];
    let mut complete = [0u64; 3];
    for i in 0..n + 20 {
        let key = IdempotencyKey::new(&format!("io-{i}"))?;
        let before = snapshot(&counts);
        let c = store.claim(&scope, &key, fp, "io", &policy)?;
        let mid = snapshot(&counts);
        let Claim::Execute(guard) = c else {
            return Err(format!("io claim answered {c:?}").into());
        };
        guard.complete(response())?;
        let after = snapshot(&counts);
        if i >= 20 {
            for k in 0..3 {
                claim[k] += mid[k] - before[k];
                complete[k] += after[k] - mid[k];
            }
        }
    }
    let per = |a: [u64; 3]| {
        json!({
            "syncs": round2(a[0] as f64 / n as f64),
            "writes": round2(a[1] as f64 / n as f64),
            "bytes": round2(a[2] as f64 / n as f64),
        })
    };
    Ok(json!({ "claim": per(claim), "complete": per(complete) }))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A store holding `records` fill records: filled now, or reused from `cache`.
struct Prepared {
    store: Store,
    records: u64,
    path: PathBuf,
    fill: Option<Duration>,
    open: Duration,
}

fn prepare(dir: &Path, records: u64, cache: Option<&Path>) -> Result<Prepared, Error> {
    let policy = Policy::default().with_effect(EffectKind::Local);
    let name = format!(
        "scale-{records}-format{}.redb",
        idemkit::adapters::redb::FORMAT_VERSION
    );
    // With a cache the filled file is kept and measured in place: each run adds
    // only its own probe records (new keys, so never a replay), a negligible drift
    // that `records_counted` shows.
    let path = cache.map_or_else(|| dir.join(&name), |c| c.join(&name));
    let fill = if path.exists() {
        eprintln!("idemkit-latency scale: reusing {}", path.display());
        None
    } else {
        eprintln!("idemkit-latency scale: filling {records} records");
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let partial = path.with_extension("partial");
        let _ = std::fs::remove_file(&partial);
        let took = scale::fill(&partial, records, policy, SystemClock)?;
        std::fs::rename(&partial, &path)?;
        Some(took)
    };
    let t = Instant::now();
    let store = idemkit::open(&path)?;
    Ok(Prepared {
        store,
        records,
        path,
        fill,
        open: t.elapsed(),
    })
}

fn scale_figure(
    dir: &Path,
    records: &[u64],
    ops: usize,
    cache: Option<&Path>,
) -> Result<serde_json::Value, Error> {
    let mut records = records.to_vec();
    records.sort_unstable();
    records.dedup();
    let mut prepared = Vec::new();
    for &n in &records {
        // Small stores are quick to fill: only the largest is cached.
        let largest = Some(&n) == records.last();
        prepared.push(prepare(dir, n, cache.filter(|_| largest))?);
    }
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let stores: Vec<&Store> = prepared.iter().map(|p| &p.store).collect();
    let mut p = probe(&stores, dir, &format!("probe-{nonce:x}"), ops)?;
    let scope = scale::scope();
    let policy = Policy::default().with_effect(EffectKind::Local);
    let fp = fingerprint();
    let mut out = Vec::new();
    for (prep, sp) in prepared.iter().zip(p.stores.iter_mut()) {
        // Replays of existing records spread over the whole key space (a read
        // transaction and a B-tree lookup; nothing is written).
        let mut replay = Latencies::with_capacity(ops);
        let mut rng = idemkit_benches::bodies::Rng::new(7);
        for _ in 0..ops {
            let i =
                (u64::from(rng.next_u32()) << 32 | u64::from(rng.next_u32())) % prep.records.max(1);
            let key = IdempotencyKey::new(&scale::fill_key(i))?;
            let t = Instant::now();
            let c = prep.store.claim(&scope, &key, fp, "probe", &policy)?;
            replay.record(t.elapsed());
            if prep.records > 0 && !matches!(c, Claim::Replay { .. }) {
                return Err(format!("expected a replay of fill record {i}, got {c:?}").into());
            }
        }
        let mut v = store_json(sp);
        v["records"] = json!(prep.records);
        v["records_counted"] = json!(prep.store.stats()?.total);
        v["fill_reused"] = json!(prep.fill.is_none());
        if let Some(fill) = prep.fill {
            v["fill_s"] = json!(round2(fill.as_secs_f64()));
            v["fill_records_per_s"] =
                json!(round2(prep.records as f64 / fill.as_secs_f64().max(1e-9)));
        }
        v["open_s"] = json!(round2(prep.open.as_secs_f64()));
        v["file_bytes"] = json!(file_len(&prep.path));
        v["replay_existing"] = replay.summary();
        out.push(v);
    }
    Ok(json!({
        "figure": "scale",
        "ops": ops,
        "stores": out,
        "fsync_append": p.fsync_append.summary(),
        "fsync_overwrite": p.fsync_overwrite.summary(),
    }))
}

fn gc_figure(
    dir: &Path,
    records: u64,
    clients: u32,
    batch: usize,
    baseline_seconds: f64,
) -> Result<serde_json::Value, Error> {
    let path = dir.join("gc.redb");
    // Records written at t0 with one-minute windows; measured an hour later, so all
    // are due for deletion. Claims during GC use new keys under the default policy.
    let t0 = UnixMillis::from_millis(1_800_000_000_000);
    let short = Policy::default()
        .with_effect(EffectKind::Local)
        .with_replay_window(Duration::from_secs(60))
        .with_record_window(Duration::from_secs(60));
    eprintln!("idemkit-latency gc: filling {records} records");
    let fill_time = scale::fill(&path, records, short, ManualClock::new(t0))?;
    let clock = ManualClock::new(t0.saturating_add(Duration::from_secs(3600)));
    let store = idemkit::open(&path)?.with_clock(clock);

    let run_claims = |stop: Arc<AtomicBool>, tag: &'static str| {
        let mut handles = Vec::new();
        for c in 0..clients {
            let store = store.clone();
            let stop = Arc::clone(&stop);
            handles.push(std::thread::spawn(move || -> Result<Latencies, Error> {
                let scope = scale::scope();
                let policy = Policy::default().with_effect(EffectKind::Local);
                let fp = fingerprint();
                let mut lat = Latencies::with_capacity(4096);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = IdempotencyKey::new(&format!("{tag}-{c}-{i}"))?;
                    i += 1;
                    let t = Instant::now();
                    if let Claim::Execute(g) =
                        store.claim(&scope, &key, fp, "gc-client", &policy)?
                    {
                        g.complete(response())?;
                    }
                    lat.record(t.elapsed());
                }
                Ok(lat)
            }));
        }
        handles
    };
    let join = |handles: Vec<std::thread::JoinHandle<Result<Latencies, Error>>>| {
        let mut all = Latencies::default();
        for h in handles {
            all.merge(h.join().map_err(|_| "a claim client panicked")??);
        }
        Ok::<_, Error>(all)
    };

    // Baseline: claims alone.
    let stop = Arc::new(AtomicBool::new(false));
    let handles = run_claims(Arc::clone(&stop), "base");
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(baseline_seconds));
    stop.store(true, Ordering::Relaxed);
    let mut base = join(handles)?;
    let base_s = t.elapsed().as_secs_f64();

    // GC until nothing is due, with the same claims running.
    let stop = Arc::new(AtomicBool::new(false));
    let handles = run_claims(Arc::clone(&stop), "during");
    let t = Instant::now();
    let mut deleted = 0u64;
    let mut batches = 0u64;
    let mut batch_lat = Latencies::default();
    loop {
        let bt = Instant::now();
        let report = store.gc(batch)?;
        batch_lat.record(bt.elapsed());
        batches += 1;
        deleted += report.deleted + report.pruned;
        if !report.more {
            break;
        }
    }
    let gc_s = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut during = join(handles)?;
    let during_s = t.elapsed().as_secs_f64();

    Ok(json!({
        "figure": "gc",
        "records": records,
        "fill_s": round2(fill_time.as_secs_f64()),
        "clients": clients,
        "batch": batch,
        "gc_deleted": deleted,
        "gc_batches": batches,
        "gc_s": round2(gc_s),
        "gc_records_per_s": round2(deleted as f64 / gc_s.max(1e-9)),
        "gc_batch": batch_lat.summary(),
        "claims_baseline": {
            "ops_per_s": round2(base.len() as f64 / base_s.max(1e-9)),
            "latency": base.summary(),
        },
        "claims_during_gc": {
            "ops_per_s": round2(during.len() as f64 / during_s.max(1e-9)),
            "latency": during.summary(),
        },
    }))
}
