//! The PostgreSQL store in one call (feature `postgres`): the engine
//! ([`Store`]) over the PostgreSQL adapter ([`PostgresAdapter`]), for fleets
//! that share one database. Beside both, so that neither names the other.

use std::sync::Arc;

use crate::adapters::postgres::{PgError, PostgresAdapter};
use crate::store::Store;

/// The store in the PostgreSQL database at `url`, with the default
/// [`PgOptions`](crate::adapters::postgres::PgOptions) (migrations run).
/// Every decision is still the core's, at the database's time (see
/// [`PgClock`](crate::adapters::postgres::PgClock)). For other options or the
/// adapter's own methods, `Store::new(Arc::new(PostgresAdapter::connect_with(url, options)?))`.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = idemkit::postgres("postgres://idemkit@127.0.0.1/idemkit")?;
/// # Ok(()) }
/// ```
pub fn postgres(url: &str) -> Result<Store, PgError> {
    Ok(Store::new(Arc::new(PostgresAdapter::connect(url)?)))
}
