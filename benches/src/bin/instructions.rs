//! `idemkit-instructions [--dir D] [--warmup W] [--ops N] [--clients C]`: claim +
//! complete of new keys a fixed number of times, for callgrind
//! (`benches/callgrind/run.sh`); prints one JSON line.

use clap::Parser as _;
use idemkit_benches::instructions::{Args, run};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(counted) => {
            println!(
                "{{\"clients\":{},\"ops\":{},\"commits\":{}}}",
                args.clients, counted.ops, counted.commits
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idemkit-instructions: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
