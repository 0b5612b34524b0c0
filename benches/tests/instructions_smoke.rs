//! CI smoke of `idemkit-instructions` (the binary callgrind counts): it still
//! runs, every operation executes, and its flags still parse. Nothing is timed
//! or counted against a target here.

use clap::Parser as _;
use idemkit_benches::instructions::{Args, run};

fn parse(args: &[&str]) -> Result<Args, clap::Error> {
    Args::try_parse_from(std::iter::once("idemkit-instructions").chain(args.iter().copied()))
}

#[test]
fn a_short_run_executes_every_operation_and_commits() {
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let args = parse(&[
        "--dir",
        dir_arg,
        "--warmup",
        "5",
        "--ops",
        "20",
        "--clients",
        "3",
    ])
    .unwrap();
    let counted = run(&args).unwrap();
    assert_eq!(counted.ops, 60);
    // Each claim and each completion is durable: at least one commit, at most
    // one per write (group commit may share them).
    assert!(
        (1..=120).contains(&counted.commits),
        "{} commits",
        counted.commits
    );
    // The temporary store is removed with its directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn flags_parse_with_defaults_and_refuse_zero() {
    let a = parse(&[]).unwrap();
    assert_eq!((a.warmup, a.ops, a.clients, a.dir), (200, 2000, 1, None));
    for bad in [
        &["--ops", "0"][..],
        &["--clients", "0"],
        &["--clients", "257"],
    ] {
        let e = parse(bad).unwrap_err().to_string();
        assert!(e.contains(bad[0]), "{bad:?}: {e}");
    }
}
