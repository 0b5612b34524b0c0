//! `idemkit-instructions`: a fixed number of claim + complete operations of new
//! keys on a redb store, for `valgrind --tool=callgrind` to count the
//! instructions of (`benches/callgrind/run.sh`).
//!
//! Time on this shared 2-core VM varies by ±30 % from run to run; instruction
//! counts do not (they vary by well under 1 %), so the write path's CPU cost is
//! compared as instructions per operation. Only [`measured_window`] is counted
//! (callgrind's `--toggle-collect`): opening the store, the warm-up and the
//! threads' start and join are outside it.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use clap::Parser;
use idemkit::adapters::redb::RedbAdapter;
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

use crate::loadgen::{LoadError, err, temp_dir_in};

/// Command-line arguments of `idemkit-instructions`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "idemkit-instructions",
    about = "claim + complete of new keys, a fixed number of times, for callgrind"
)]
pub struct Args {
    /// Directory for the store file (a fresh subdirectory is made in it and
    /// removed after). Use a tmpfs (/dev/shm) so that fsync costs no waiting:
    /// callgrind counts user-space instructions only.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Operations per client before the counted window (the store's tables and
    /// caches warm up).
    #[arg(long, default_value_t = 200)]
    pub warmup: u64,
    /// Operations per client inside the counted window.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub ops: u64,
    /// Client threads sharing the store (group commit groups their writes).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub clients: u32,
}

/// What a run did: the operations inside the counted window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// Claim + complete operations in the window, over all clients.
    pub ops: u64,
    /// Durable commits the store made in the window.
    pub commits: u64,
}

/// Runs the warm-up and then the counted window.
///
/// # Errors
///
/// The store could not be opened or an operation failed or did not execute.
pub fn run(args: &Args) -> Result<Counted, LoadError> {
    let base = temp_dir_in(args.dir.as_deref(), "idemkit-instructions-")?;
    let adapter =
        RedbAdapter::open(base.path().join("instructions.redb")).map_err(|e| err("open", e))?;
    let adapter = Arc::new(adapter);
    let store = Store::new(adapter.clone());
    let clients = args.clients as usize;
    // Warm-up on one thread, then the window on every client at once: the
    // barrier's last waiter is the main thread, which enters the window itself
    // as client 0 so that the toggled function holds the whole window.
    ops_of_client(&store, usize::MAX, 0, args.warmup)?;
    let before = adapter.commit_stats().commits;
    let counted = measured_window(&store, clients, args.ops)?;
    let after = adapter.commit_stats().commits;
    Ok(Counted {
        ops: counted,
        commits: after - before,
    })
}

/// The counted window: `clients` threads, `ops` claim + complete each. Never
/// inlined, so callgrind can toggle collection on its name.
#[inline(never)]
pub fn measured_window(store: &Store, clients: usize, ops: u64) -> Result<u64, LoadError> {
    let barrier = Arc::new(Barrier::new(clients));
    let mut handles = Vec::with_capacity(clients.saturating_sub(1));
    for c in 1..clients {
        let store = store.clone();
        let barrier = Arc::clone(&barrier);
        handles.push(std::thread::spawn(move || {
            barrier.wait();
            ops_of_client(&store, c, 0, ops)
        }));
    }
    barrier.wait();
    let mut total = ops_of_client(store, 0, 0, ops)?;
    for h in handles {
        total += h
            .join()
            .map_err(|_| LoadError("a client panicked".into()))??;
    }
    Ok(total)
}

/// Client `client`'s claim + complete of `n` new keys, from `first` on.
fn ops_of_client(store: &Store, client: usize, first: u64, n: u64) -> Result<u64, LoadError> {
    let scope = Scope::new("bench", "instructions").map_err(|e| err("scope", e))?;
    let policy = Policy::default().with_effect(EffectKind::Local);
    let fp = Fingerprint::from_bytes(*blake3::hash(b"{\"slot\":\"10:00\"}").as_bytes());
    let owner = format!("client-{client}");
    for i in first..first + n {
        let key = IdempotencyKey::new(&format!("c{client}-{i}")).map_err(|e| err("key", e))?;
        match store
            .claim(&scope, &key, fp, &owner, &policy)
            .map_err(|e| err("claim", e))?
        {
            Claim::Execute(guard) => guard
                .complete(StoredResponse::new(201, RESPONSE.to_vec()))
                .map_err(|e| err("complete", e))?,
            _ => return Err(LoadError(format!("key {key}: the claim did not execute"))),
        }
    }
    Ok(n)
}

const RESPONSE: &[u8] = b"{\"id\":\"appt_000001\",\"status\":\"confirmed\"}";
