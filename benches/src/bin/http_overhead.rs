//! `idemkit-http-overhead`: one axum handler served bare (`POST /bare`) and
//! behind the idempotency layer on an in-memory store (`POST /layered`), for
//! `benches/http/run.sh` to measure with wrk what the layer adds to a request.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use idemkit_benches::http_overhead::{self, Bench};

/// Serves the same axum handler bare and behind the idempotency layer.
///
/// Routes (one listener): `POST /bare` — the handler alone (an Idempotency-Key
/// header is ignored); `POST /layered` — the same handler behind
/// `IdempotencyLayer` on the in-memory adapter (operation `bench.echo`,
/// External, key required, tenant `bench`): a fresh key executes and records,
/// a known key replays with `Idempotent-Replayed: true`; `GET /ping` — readiness.
/// Both POST routes answer 201 `{"ok":true,"bytes":N}`.
#[derive(Parser, Debug)]
#[command(name = "idemkit-http-overhead")]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:19200")]
    listen: SocketAddr,
    /// Tokio worker threads (the blocking pool is tokio's default).
    #[arg(long, default_value_t = 2)]
    worker_threads: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.worker_threads.max(1))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idemkit-http-overhead: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let (addr, server) = http_overhead::bind(args.listen, Bench::new()).await?;
        eprintln!("idemkit-http-overhead: listening on http://{addr} (/bare, /layered, /ping)");
        server.await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idemkit-http-overhead: {e}");
            ExitCode::FAILURE
        }
    }
}
