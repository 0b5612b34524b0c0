//! CI smoke of the benchmark tooling: nothing here times anything against a target;
//! it only checks that every figure still runs and its output still parses.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use clap::Parser as _;
use idemkit::core::machine::Policy;
use idemkit::core::record::EffectKind;
use idemkit_benches::bodies::{self, Shape};
use idemkit_benches::loadgen::{self, Args, Backend, Keys};
use idemkit_benches::stats::Latencies;

fn parse(args: &[&str]) -> Result<Args, clap::Error> {
    Args::try_parse_from(std::iter::once("idemkit-loadgen").chain(args.iter().copied()))
}

#[test]
fn loadgen_arguments_parse() {
    let a = parse(&[
        "--backend",
        "sqlite",
        "--clients",
        "64",
        "--seconds",
        "2.5",
        "--dir",
        "/tmp/x",
        "--keys",
        "hot",
    ])
    .unwrap();
    assert_eq!(a.backend, Backend::Sqlite);
    assert_eq!(a.clients, 64);
    assert_eq!(a.seconds, 2.5);
    assert_eq!(a.dir.as_deref(), Some(Path::new("/tmp/x")));
    assert_eq!(a.keys, Keys::Hot);
    let d = parse(&["--backend", "redb"]).unwrap();
    assert_eq!((d.clients, d.keys, d.dir), (1, Keys::Unique, None));
    assert!(!d.no_validate);
    let p = parse(&[
        "--backend",
        "postgres",
        "--postgres",
        "postgres://u@127.0.0.1:5432/db",
        "--clients",
        "16",
        "--no-validate",
    ])
    .unwrap();
    assert_eq!(p.backend, Backend::Postgres);
    assert_eq!(
        p.postgres.as_deref(),
        Some("postgres://u@127.0.0.1:5432/db")
    );
    assert_eq!((p.clients, p.no_validate, p.pool_size), (16, true, None));
    assert!(!p.validate_every_checkout);
    let pooled = parse(&[
        "--backend",
        "postgres",
        "--clients",
        "64",
        "--pool-size",
        "16",
    ])
    .unwrap();
    assert_eq!(pooled.pool_size, Some(16));
    assert_eq!(
        (pooled.postgres_pool_size(), p.postgres_pool_size()),
        (16, 16)
    );
    assert!(
        parse(&["--backend", "postgres", "--pool-size", "0"]).is_err(),
        "a pool of no connections is refused"
    );
    let every = parse(&["--backend", "postgres", "--validate-every-checkout"]).unwrap();
    assert!(every.validate_every_checkout);
    assert!(
        parse(&[
            "--backend",
            "postgres",
            "--validate-every-checkout",
            "--no-validate"
        ])
        .is_err(),
        "checking every checkout and never checking are exclusive"
    );
}

#[test]
fn loadgen_postgres_without_a_url_says_how_to_give_one() {
    let mut a = parse(&["--backend", "postgres", "--seconds", "0.1"]).unwrap();
    // Whatever the environment holds (IDEMKIT_TEST_POSTGRES_URL is its default).
    a.postgres = None;
    let e = loadgen::run(&a).unwrap_err().to_string();
    assert!(e.contains("--postgres URL"), "{e}");
}

#[test]
fn loadgen_rejects_bad_flags_clearly() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--backend", "mysql"],
            "possible values: redb, sqlite, fsync, postgres",
        ),
        (&["--clients", "4"], "--backend"),
        (&["--backend", "redb", "--clients", "0"], "--clients"),
        (
            &["--backend", "redb", "--seconds", "-1"],
            "seconds must be > 0",
        ),
        (
            &["--backend", "redb", "--seconds", "soon"],
            "not a number of seconds",
        ),
        (
            &["--backend", "redb", "--keys", "cold"],
            "possible values: unique, hot",
        ),
    ];
    for (args, needle) in cases {
        let e = parse(args).unwrap_err().to_string();
        assert!(e.contains(needle), "{args:?}: {e}");
    }
}

fn quick(backend: Backend, keys: Keys) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let args = parse(&[
        "--backend",
        match backend {
            Backend::Redb => "redb",
            Backend::Sqlite => "sqlite",
            Backend::Fsync => "fsync",
            Backend::Postgres => unreachable!("tests/postgres_loadgen.rs"),
        },
        "--clients",
        "3",
        "--seconds",
        "0.2",
        "--keys",
        if keys == Keys::Hot { "hot" } else { "unique" },
        "--hot-keys",
        "2",
        "--dir",
        dir.path().to_str().unwrap(),
    ])
    .unwrap();
    let v = loadgen::run(&args).unwrap().to_json();
    for field in [
        "backend",
        "clients",
        "ops",
        "seconds",
        "ops_per_s",
        "p50_us",
        "p99_us",
    ] {
        assert!(v.get(field).is_some(), "{field} missing in {v}");
    }
    assert!(v["ops"].as_u64().unwrap() > 0, "{v}");
    // The run's own subdirectory is removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    v
}

#[test]
fn loadgen_runs_every_backend() {
    for backend in [Backend::Redb, Backend::Sqlite, Backend::Fsync] {
        let v = quick(backend, Keys::Unique);
        assert_eq!(v["executed"], v["ops"], "{v}");
    }
    for backend in [Backend::Redb, Backend::Sqlite] {
        let v = quick(backend, Keys::Hot);
        // Two hot keys: each executes once, everything else replays or waits.
        assert!(v["executed"].as_u64().unwrap() <= 2, "{v}");
    }
}

#[test]
fn bodies_are_deterministic_sized_and_strict_json() {
    for (shape, size, body) in bodies::all() {
        let target = bodies::SIZES.iter().find(|s| s.0 == size).unwrap().1;
        assert!(
            body.len() >= target && body.len() < target + 400,
            "{size}: {}",
            body.len()
        );
        assert_eq!(body, bodies::generate(shape, target));
        idemkit_core::canonicalize(&body).unwrap_or_else(|e| panic!("{shape:?} {size}: {e}"));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(v.is_object() || v.is_array());
    }
    // The JavaScript port checks itself against these bytes (see wasm/bench).
    assert!(bodies::generate(Shape::Api, 100).starts_with(b"{\"request_id\":\"req-"));
}

#[test]
fn quantiles_use_nearest_rank() {
    let mut l = Latencies::default();
    for us in 1..=100u64 {
        l.record(Duration::from_micros(us));
    }
    assert_eq!(l.quantile_us(0.5), 50.0);
    assert_eq!(l.quantile_us(0.99), 99.0);
    assert_eq!(l.quantile_us(1.0), 100.0);
    assert_eq!(Latencies::default().quantile_us(0.5), 0.0);
}

#[test]
fn fill_writes_records_a_normal_open_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fill.redb");
    let policy = Policy::default().with_effect(EffectKind::Local);
    idemkit_benches::scale::fill(&path, 300, policy, idemkit::clock::SystemClock).unwrap();
    let store = idemkit::open(&path).unwrap();
    assert_eq!(store.stats().unwrap().total, 300);
    assert!(store.verify().unwrap().problems.is_empty());
}

fn latency(args: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemkit-latency"))
        .arg("--dir")
        .arg(dir.path())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn latency_figures_run() {
    let d = latency(&["durable", "--ops", "5"]);
    assert_eq!(d["claim_complete"]["n"], 5);
    assert_eq!(d["fsync_append"]["n"], 5);
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path().to_str().unwrap();
    let s = latency(&[
        "scale",
        "--records",
        "30",
        "--records",
        "40",
        "--ops",
        "5",
        "--cache",
        cache,
    ]);
    let stores = s["stores"].as_array().unwrap();
    assert_eq!(stores.len(), 2);
    // Filled, then 20 warm-up and 5 probe records each.
    assert_eq!(stores[0]["records_counted"], 30 + 25);
    assert_eq!(stores[1]["records_counted"], 40 + 25);
    assert_eq!(stores[1]["fill_reused"], false);
    assert_eq!(s["fsync_append"]["n"], 5);
    let s = latency(&["scale", "--records", "40", "--ops", "5", "--cache", cache]);
    assert_eq!(s["stores"][0]["fill_reused"], true);
    assert_eq!(s["stores"][0]["records_counted"], 40 + 2 * 25);
    let g = latency(&[
        "gc",
        "--records",
        "50",
        "--batch",
        "20",
        "--baseline-seconds",
        "0.1",
    ]);
    assert_eq!(g["gc_deleted"], 50);
}

#[test]
fn bodies_binary_prints_every_body() {
    let out = Command::new(env!("CARGO_BIN_EXE_idemkit-bodies"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 9);
}

/// Whether python3 runs here (the report is Python); a test that needs it says so and skips.
fn python_present() -> bool {
    let present = Command::new("python3").arg("--version").output().is_ok();
    if !present {
        eprintln!("python3 not found: skipping the report check");
    }
    present
}

/// Every needle is in the rendered text, which is shown when one is not.
fn assert_contains_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

/// `report.py render RESULTS` into `out`: BENCHMARKS.md's text (chart.svg beside it).
fn render_report(results: &Path, out: &Path) -> String {
    let md = out.join("BENCHMARKS.md");
    let status = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("report.py"))
        .arg("render")
        .arg(results)
        .arg("--md")
        .arg(&md)
        .arg("--svg")
        .arg(out.join("chart.svg"))
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(&md).unwrap()
}

#[test]
fn report_renders_the_fixture() {
    if !python_present() {
        return;
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let text = render_report(&here.join("tests/fixture"), out.path());
    assert_contains_all(
        &text,
        &[
            "## Targets",
            "fingerprint vs `serde_json::from_slice::<Value>`",
            // The sections kept in their own modules (fixture files copied from the 2026-12-02 run).
            "## Instructions per claim + complete (callgrind)",
            "## PostgreSQL: idemkit against pgbench, on idemkit's statements and on a hand-written table",
            "## What the idempotency layer adds to a request (wrk)",
            "## The npm package against @node-idempotency/core (Node)",
            // npm.json from a run whose figures took turns over rounds: its ratios are paired.
            "each ratio and added µs the median over rounds of the two figures measured in that round",
            "| npm replay rate vs peer: idemkit replayed claim ÷ @node-idempotency/core replayed onRequest (ops/s) | 1.27× |",
            // npm.json's fetch copies and idemkit's own share of a fresh handle() (added from a later run than the rest).
            "Node's two fetch copies take 31.1 µs",
            // npm_node22.json: the same script run by Node 22 (0.2 s per figure), its own table.
            "**The same script on v22.23.3**",
            "Of the 37.8 µs `handle()` adds on a new key, Node's two fetch copies take 15.4 µs",
            "idempotency layer, replay: µs added to the bare route's p50",
            "## Durable claim + complete vs raw fdatasync",
            "## Throughput vs clients",
            // loadgen.json's redb rows carry the store's commit statistics (added from a later run than the rest).
            "### What one group commit spends (redb, new keys)",
            "| 64 | ",
            "## Claim latency vs records in the store",
            "## GC while claims continue",
            "## wasm fingerprint in Node",
            "## The canonicalize command against jq",
            "idemkit canonicalize ÷ jq -cS . (3 MiB API document, whole process)",
        ],
    );
    let svg = std::fs::read_to_string(out.path().join("chart.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
}

/// `report.py loadgen` keeps, for each point, the round with the median rate
/// (its latencies with it) and every round's rate in order; the report's ratios
/// pair the two rates of each round and take the median, which differs here
/// from the quotient of the median rows (a round where SQLite was slow is not
/// paired with redb's best one).
#[test]
fn loadgen_rounds_keep_the_median_round_and_pair_the_ratios() {
    if !python_present() {
        return;
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let row = |backend: &str, clients: u32, ops: f64, p50: f64| {
        serde_json::json!({
            "backend": backend, "clients": clients, "keys": "unique", "ops_per_s": ops,
            "p50_us": p50, "p99_us": 1.0, "executed": 1, "replayed": 0, "group_commit": null,
        })
        .to_string()
    };
    // Three rounds, the points in turn: redb at 1 and 64 clients, SQLite at 64.
    let rounds = [
        (3000.0, 24000.0, 2000.0),
        (3300.0, 20000.0, 2600.0),
        (2900.0, 26000.0, 2400.0),
    ];
    let mut lines = String::new();
    for (i, (one, top, sqlite)) in rounds.iter().enumerate() {
        let p50 = 10.0 + i as f64;
        for line in [
            row("redb", 1, *one, p50),
            row("redb", 64, *top, p50),
            row("sqlite", 64, *sqlite, p50),
        ] {
            lines.push_str(&line);
            lines.push('\n');
        }
    }
    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    std::fs::write(dir.path().join("loadgen.jsonl"), lines).unwrap();
    let status = Command::new("python3")
        .arg(here.join("report.py"))
        .arg("loadgen")
        .arg(dir.path().join("loadgen.jsonl"))
        .arg(results.join("loadgen.json"))
        .status()
        .unwrap();
    assert!(status.success());
    let rows: serde_json::Value =
        serde_json::from_slice(&std::fs::read(results.join("loadgen.json")).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3, "one row per point: {rows:?}");
    let point = |backend: &str, clients: u64| {
        rows.iter()
            .find(|r| r["backend"] == backend && r["clients"] == clients)
            .unwrap()
    };
    // redb at 64: rates 24,000 / 20,000 / 26,000, the median is the first round's.
    assert_eq!(point("redb", 64)["ops_per_s"], 24000.0);
    assert_eq!(point("redb", 64)["p50_us"], 10.0);
    let rates: Vec<f64> = point("redb", 64)["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(rates, [24000.0, 20000.0, 26000.0]);
    // SQLite at 64: 2,000 / 2,600 / 2,400, the median is the third round's.
    assert_eq!(point("sqlite", 64)["ops_per_s"], 2400.0);
    assert_eq!(point("sqlite", 64)["p50_us"], 12.0);

    let text = render_report(&results, dir.path());
    // Paired: 24,000 ÷ 2,000, 20,000 ÷ 2,600, 26,000 ÷ 2,400 → 12.00, 7.69, 10.83: 10.83×
    // (the median rows' quotient would be 24,000 ÷ 2,400 = 10.00×); 64 ÷ 1: 8.00, 6.06, 8.97 → 8.00×.
    assert_contains_all(
        &text,
        &[
            "The points took turns over 3 rounds",
            "| redb / SQLite at 64 clients (unique keys) | 10.83× |",
            "| redb 64 clients / redb 1 client (unique keys) | 8.00× |",
            "| 24,000 / 20,000 / 26,000 |",
        ],
    );
}

/// `cpu_of.py` runs what benches/postgres/run.sh measures: a command's own CPU
/// time must be counted, and fit inside the machine's busy time over the same span.
#[test]
fn cpu_of_counts_a_commands_cpu_inside_the_machines() {
    if !python_present() || !Path::new("/proc/stat").exists() {
        return;
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cpu.json");
    let busy_loop =
        "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass";
    let status = Command::new("python3")
        .arg(here.join("postgres/cpu_of.py"))
        .arg(&out)
        .args(["--", "python3", "-c", busy_loop])
        .status()
        .unwrap();
    assert!(status.success());
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let (client, machine, wall) = (
        m["client_cpu_s"].as_f64().unwrap(),
        m["machine_busy_s"].as_f64().unwrap(),
        m["wall_s"].as_f64().unwrap(),
    );
    assert!(client >= 0.35, "the loop's 0.4 s of CPU: {m}");
    // /proc/stat counts in ticks (10 ms here), the child's own time more finely.
    assert!(
        machine >= client - 0.05,
        "the machine's busy time holds the command's: {m}"
    );
    assert!(wall >= 0.35 && m["cpus"].as_u64().unwrap() >= 1, "{m}");

    // The command's exit status is the script's.
    let status = Command::new("python3")
        .arg(here.join("postgres/cpu_of.py"))
        .arg(dir.path().join("failed.json"))
        .args(["--", "python3", "-c", "raise SystemExit(3)"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3));
}

/// The PostgreSQL section gives each side's CPU per op, and at a client count
/// where both sides filled the cores, what the target needs of idemkit's side.
#[test]
fn postgres_report_gives_the_machines_time_per_op() {
    if !python_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let point = |side: &str, clients: u32, ops: f64, client_cpu: f64, machine: f64, busy: f64| {
        serde_json::json!({
            "side": side, "clients": clients, "round": 1, "ops": 1000, "seconds": 5.0,
            "ops_per_s": ops, "p50_us": 100.0, "p99_us": 200.0, "statements_per_op": 2.0,
            "commits_per_op": 2.0, "client_cpu_us_per_op": client_cpu,
            "machine_us_per_op": machine, "cores_busy": busy,
        })
    };
    let doc = serde_json::json!({
        "started": "2026-12-07T00:00:00Z", "seconds_per_point": 5.0, "rounds": 1,
        "clients": [1, 64], "server": "15", "pgbench": "pgbench 15", "cpus": 2,
        "commands": {"idemkit": "idemkit-loadgen", "pgbench": "pgbench", "pgbench_same_statements": "pgbench"},
        "transactions": "autocommit",
        "points": [
            point("idemkit", 1, 1800.0, 75.0, 350.0, 0.63),
            point("pgbench_same_statements", 1, 2100.0, 43.0, 296.0, 0.62),
            point("pgbench", 1, 2400.0, 38.0, 256.0, 0.60),
            point("idemkit", 64, 6000.0, 66.0, 329.0, 1.94),
            point("pgbench_same_statements", 64, 8000.0, 26.0, 240.0, 1.89),
            point("pgbench", 64, 9400.0, 25.0, 192.0, 1.74),
        ],
        "ratios": [],
    });
    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    std::fs::write(results.join("postgres.json"), doc.to_string()).unwrap();
    let text = render_report(&results, dir.path());
    assert_contains_all(
        &text,
        &[
            "| client CPU µs / op | machine CPU µs / op | cores busy |",
            "| 64 | 1 | **idemkit** | 6,000 | 100 | 200 | 2.00 | 2.00 | — | 66.0 | 329 | 1.94 |",
            // (240 ÷ 329) × (1.94 ÷ 1.89); and 240 × (1.94 ÷ 1.89) ÷ 0.8: the machine's
            // time per op idemkit may spend at 64 clients, as busy as it kept the cores.
            "idemkit ÷ pgbench ≈ (240 ÷ 329) × (1.94 ÷ 1.89 cores) = 0.75×",
            "0.80× needs idemkit's side at or under 308 µs per op.",
            "- The machine at 1 client (medians of the rounds): idemkit kept 0.63 cores busy",
            "The cores were not both full, so each op's wait, not the machine's time, set the pace.",
        ],
    );
}

/// A redb row whose groups carried their transaction on: the group commit
/// table says which share of the groups left redb's commit to a later one.
#[test]
fn group_commit_report_gives_the_groups_carried_on() {
    if !python_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let row = serde_json::json!({
        "backend": "redb", "clients": 64, "keys": "unique", "ops_per_s": 29000.0,
        "p50_us": 2000.0, "p99_us": 5000.0, "executed": 1, "replayed": 0, "seconds": 4.0,
        "group_commit": {
            "commits": 2000, "carried": 1875, "largest_group": 64, "logged": 2000,
            "operations": 120000, "operations_per_transaction": 60.0, "transactions": 2000,
            "us_per_transaction": {"answering": 420.0, "beginning": 1.0, "committing": 300.0,
                                   "logging": 230.0, "running": 270.0},
        },
    });
    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    std::fs::write(results.join("loadgen.json"), format!("[{row}]")).unwrap();
    let text = render_report(&results, dir.path());
    assert_contains_all(
        &text,
        &[
            "| answering the callers | sum | carried on (no redb commit) |",
            // 1,875 of 2,000 groups.
            "| 64 | 500 | 60.0 (64) | 1.00 | 270 | 300 | 230 | 420 | 991 | 94% |",
        ],
    );
}

/// Every benchmark script still parses (`bash -n`): the ones bench-all.sh runs
/// need Debian tools (valgrind, wrk, nginx, PostgreSQL) that a test run may not
/// have, so their syntax at least is checked everywhere.
#[test]
fn every_benchmark_script_is_valid_shell() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scripts = [
        here.join("callgrind/run.sh"),
        here.join("canonicalize/run.sh"),
        here.join("http/run.sh"),
        here.join("postgres/run.sh"),
        here.join("proxy/run.sh"),
        here.join("../scripts/bench-all.sh"),
    ];
    for script in &scripts {
        assert!(script.exists(), "{} is missing", script.display());
        let status = Command::new("bash").arg("-n").arg(script).status().unwrap();
        assert!(status.success(), "bash -n {}", script.display());
    }
}
