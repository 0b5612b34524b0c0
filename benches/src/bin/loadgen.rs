//! `idemkit-loadgen --backend redb|sqlite|fsync|postgres --clients N --seconds S [--dir PATH] [--keys unique|hot|mixed]`:
//! prints one JSON line.

use clap::Parser as _;
use idemkit_benches::loadgen::{Args, run, write_pgbench_script};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if let Some(file) = &args.pgbench_script {
        return match write_pgbench_script(&args, file) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("idemkit-loadgen: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    match run(&args) {
        Ok(mut report) => {
            println!("{}", report.to_json());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idemkit-loadgen: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
