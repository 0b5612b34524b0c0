//! `idemkit-loadgen --backend redb|sqlite|fsync --clients N --seconds S [--dir PATH] [--keys unique|hot|mixed]`:
//! prints one JSON line.

use clap::Parser as _;
use idemkit_benches::loadgen::{Args, run};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
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
