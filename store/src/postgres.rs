//! The PostgreSQL store (feature `postgres`): the engine ([`Store`]) over the
//! PostgreSQL adapter ([`PgStore`]), for fleets that share one database.
//!
//! It lives beside both, not in either, so that neither the engine nor the
//! adapter names the other: the engine knows no database, the adapter no engine.
//!
//! ```no_run
//! use idemkit::adapters::postgres::PgStore;
//! use idemkit::store::Store;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::postgres(PgStore::connect("postgres://idemkit@127.0.0.1/idemkit")?);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use crate::adapters::postgres::PgStore;
use crate::store::Store;

impl Store {
    /// The engine over PostgreSQL, so several instances share one database.
    /// Every decision is still the core's, at the database's time (the
    /// adapter's clock, see [`crate::adapters::postgres`]).
    #[must_use]
    pub fn postgres(store: PgStore) -> Store {
        Store::new(Arc::new(store))
    }
}
