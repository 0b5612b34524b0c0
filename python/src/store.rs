//! The record store ([`idemkit::store::Store`]) over redb or PostgreSQL, and the
//! operator calls: `get`, `list`, `resolve`, `gc`, `stats`. Records are shown
//! with the names `idemkit list --json` prints.

use std::path::PathBuf;

use idemkit::store::{ListedRecord, Store as RustStore};
use idemkit_core::machine::{Policy, Resolution};
use idemkit_core::record::{Record, RecordState, StateName, StoredResponse};
use idemkit_core::{IdempotencyKey, Scope};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors;

/// An idemkit record store: an embedded redb file (`Store(path)`), PostgreSQL
/// (`Store.postgres(url)`), or memory (`Store.in_memory()`, tests). Shared by
/// every route and thread; cheap to pass around.
#[pyclass(frozen, module = "idemkit_rs._native")]
pub struct Store {
    pub(crate) inner: RustStore,
}

pub(crate) fn scope_and_key(
    py: Python<'_>,
    tenant: &str,
    operation: &str,
    key: &str,
) -> PyResult<(Scope, IdempotencyKey)> {
    let scope = Scope::new(tenant, operation)
        .map_err(|e| errors::argument(format!("tenant and operation: {e}")))?;
    let key = IdempotencyKey::new(key).map_err(|e| errors::key_error(py, &e))?;
    Ok((scope, key))
}

fn state_name(text: &str) -> PyResult<StateName> {
    text.parse().map_err(|_| {
        errors::argument(format!(
            "state must be running, completed, unknown or released, not {text:?}"
        ))
    })
}

/// What `idemkit list --json` shows of one state: its own fields.
fn detail<'py>(py: Python<'py>, record: &Record) -> PyResult<Bound<'py, PyDict>> {
    let detail = PyDict::new(py);
    match &record.state {
        RecordState::Running { lease } => {
            detail.set_item("owner", &lease.owner)?;
            detail.set_item("token", lease.token.get())?;
            detail.set_item("lease_expires_at_ms", lease.expires_at.as_millis())?;
        }
        RecordState::Completed {
            response,
            completed_at,
        } => {
            detail.set_item("status", response.status)?;
            detail.set_item("resource_ref", &response.resource_ref)?;
            detail.set_item("body_kept", response.body.is_some())?;
            detail.set_item("completed_at_ms", completed_at.as_millis())?;
        }
        RecordState::Unknown { reason, since } => {
            detail.set_item("reason", reason.to_string())?;
            detail.set_item("since_ms", since.as_millis())?;
        }
        RecordState::Released { at } => detail.set_item("released_at_ms", at.as_millis())?,
    }
    Ok(detail)
}

/// A record as `idemkit list --json` prints it, plus the stored response of a
/// Completed one (`response`: status, headers, body) for `get`.
fn record_view<'py>(
    py: Python<'py>,
    scope: &Scope,
    key: &IdempotencyKey,
    record: &Record,
) -> PyResult<Bound<'py, PyDict>> {
    let view = PyDict::new(py);
    view.set_item("log_ref", scope.record_id(key).log_ref().to_string())?;
    view.set_item("tenant", scope.tenant())?;
    view.set_item("operation", scope.operation())?;
    view.set_item("key", key.as_str())?;
    view.set_item("state", record.state.name().to_string())?;
    view.set_item("effect", record.effect.to_string())?;
    view.set_item("attempt", record.attempt)?;
    view.set_item("last_token", record.last_token.get())?;
    view.set_item("created_at_ms", record.created_at.as_millis())?;
    view.set_item("updated_at_ms", record.updated_at.as_millis())?;
    view.set_item("detail", detail(py, record)?)?;
    Ok(view)
}

fn listed_views<'py>(
    py: Python<'py>,
    listed: &[ListedRecord],
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    listed
        .iter()
        .map(|l| record_view(py, &l.scope, &l.key, &l.record))
        .collect()
}

impl Store {
    /// Runs `f` on the store with the GIL released (stores fsync or wait on the network).
    fn run<T: Send, E: std::fmt::Display + Send>(
        &self,
        py: Python<'_>,
        code: &str,
        f: impl FnOnce(&RustStore) -> Result<T, E> + Send,
    ) -> PyResult<T> {
        let store = self.inner.clone();
        py.detach(move || f(&store))
            .map_err(|e| errors::store_error(py, code, e))
    }
}

#[pymethods]
impl Store {
    /// Opens (or creates) the redb store file at `path` (mode 0600). A process that
    /// crashed with executions running leaves them settled at once: a dispatched
    /// External one becomes unknown, a Local one released.
    #[new]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let store = py
            .detach(move || idemkit::open(&path))
            .map_err(|e| errors::store_error(py, "store-open-failed", e))?;
        Ok(Store { inner: store })
    }

    /// A store in memory (tests, examples): gone with the process.
    #[staticmethod]
    fn in_memory(py: Python<'_>) -> PyResult<Self> {
        let store =
            idemkit::in_memory().map_err(|e| errors::store_error(py, "store-open-failed", e))?;
        Ok(Store { inner: store })
    }

    /// The store in PostgreSQL at `url` (`postgres://user@host:port/db`), shared by
    /// every instance of a fleet; tables in `schema` (default `public`), created or
    /// migrated on connect. Every lease decision goes by the database's clock.
    #[staticmethod]
    #[pyo3(signature = (url, *, schema = None, pool_size = 16))]
    fn postgres(
        py: Python<'_>,
        url: String,
        schema: Option<String>,
        pool_size: u32,
    ) -> PyResult<Self> {
        postgres_store(py, url, schema, pool_size)
    }

    /// The record of `(tenant, operation, key)`, or `None`; a Completed record's
    /// stored response is under `"response"` (status, headers, body).
    fn get<'py>(
        &self,
        py: Python<'py>,
        tenant: &str,
        operation: &str,
        key: &str,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let (scope, key) = scope_and_key(py, tenant, operation, key)?;
        let (s, k) = (scope.clone(), key.clone());
        let Some(record) = self.run(py, "store-query-failed", move |store| store.get(&s, &k))?
        else {
            return Ok(None);
        };
        let view = record_view(py, &scope, &key, &record)?;
        if let RecordState::Completed { response, .. } = &record.state {
            view.set_item("response", response_view(py, response)?)?;
        }
        Ok(Some(view))
    }

    /// Every record, or those in `state` (`"running"`, `"completed"`, `"unknown"`,
    /// `"released"`), as `idemkit list --json` shows them. With `unresolved=True`:
    /// Running records past their lease, then Unknown records (what an operator
    /// must settle).
    #[pyo3(signature = (state = None, *, unresolved = false))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        state: Option<&str>,
        unresolved: bool,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let listed = if unresolved {
            if state.is_some() {
                return Err(errors::argument("give state or unresolved=True, not both"));
            }
            self.run(py, "store-query-failed", |store| store.list_unresolved())?
        } else {
            let state = state.map(state_name).transpose()?;
            self.run(py, "store-query-failed", move |store| store.list(state))?
        };
        listed_views(py, &listed)
    }

    /// Settles an unresolved record (Unknown, or Running past its lease). With
    /// `applied=True` the effect happened and every retry replays `status`,
    /// `headers` and `body`; with `applied=False` it did not and a retry executes
    /// again. The record keeps the windows it was claimed under. Returns the
    /// record as written.
    #[pyo3(signature = (tenant, operation, key, *, applied, status = 200, headers = Vec::new(), body = Vec::new(), resource_ref = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "the keyword arguments of the Python method, as `idemkit resolve` takes them"
    )]
    fn resolve<'py>(
        &self,
        py: Python<'py>,
        tenant: &str,
        operation: &str,
        key: &str,
        applied: bool,
        status: u16,
        headers: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
        resource_ref: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (scope, key) = scope_and_key(py, tenant, operation, key)?;
        let resolution = if applied {
            Resolution::Applied(StoredResponse {
                status,
                headers,
                body: Some(body),
                resource_ref,
            })
        } else {
            Resolution::NotApplied
        };
        let (s, k) = (scope.clone(), key.clone());
        let record = self.run(py, "store-resolve-refused", move |store| {
            store.resolve(&s, &k, resolution, &Policy::default())
        })?;
        record_view(py, &scope, &key, &record)
    }

    /// Prunes response bodies past their replay window and deletes records past
    /// their record window (never Running or Unknown ones), in batches of
    /// `max_batch` until none is due. Returns `{"pruned", "deleted", "batches",
    /// "undecodable"}` as `idemkit gc --json` prints it.
    #[pyo3(signature = (*, max_batch = 1000))]
    fn gc<'py>(&self, py: Python<'py>, max_batch: usize) -> PyResult<Bound<'py, PyDict>> {
        let (pruned, deleted, batches, undecodable) =
            self.run(py, "store-query-failed", move |store| {
                let (mut pruned, mut deleted, mut batches) = (0u64, 0u64, 0u64);
                loop {
                    let report = store.gc(max_batch.max(1))?;
                    pruned += report.pruned;
                    deleted += report.deleted;
                    batches += 1;
                    if !report.more {
                        // The last batch walked every due record: its count of
                        // undecodable ones is the total.
                        return Ok::<_, idemkit::store::QueryError>((
                            pruned,
                            deleted,
                            batches,
                            report.undecodable,
                        ));
                    }
                }
            })?;
        let report = PyDict::new(py);
        report.set_item("pruned", pruned)?;
        report.set_item("deleted", deleted)?;
        report.set_item("batches", batches)?;
        report.set_item("undecodable", undecodable)?;
        Ok(report)
    }

    /// Counts per state: `{"total", "expired_leases", "by_state": {...}, "file_size"}`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.run(py, "store-query-failed", |store| store.stats())?;
        let by_state = PyDict::new(py);
        for (state, count) in &stats.by_state {
            by_state.set_item(state.to_string(), count)?;
        }
        let view = PyDict::new(py);
        view.set_item("total", stats.total)?;
        view.set_item("expired_leases", stats.expired_leases)?;
        view.set_item("by_state", by_state)?;
        view.set_item("file_size", stats.file_size)?;
        Ok(view)
    }

    /// Whether the store can write now: `{"writable": bool, ...}` as the health
    /// endpoint of the Rust middleware serves it.
    fn health(&self, py: Python<'_>) -> String {
        let store = self.inner.clone();
        py.detach(move || store.health().to_json())
    }
}

/// A stored response as Python sees it.
pub(crate) fn response_view<'py>(
    py: Python<'py>,
    response: &StoredResponse,
) -> PyResult<Bound<'py, PyDict>> {
    let view = PyDict::new(py);
    view.set_item("status", response.status)?;
    let headers: Vec<(String, Bound<'py, PyBytes>)> = response
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), PyBytes::new(py, v)))
        .collect();
    view.set_item("headers", headers)?;
    view.set_item("body", response.body.as_ref().map(|b| PyBytes::new(py, b)))?;
    view.set_item("resource_ref", &response.resource_ref)?;
    Ok(view)
}

#[cfg(feature = "postgres")]
fn postgres_store(
    py: Python<'_>,
    url: String,
    schema: Option<String>,
    pool_size: u32,
) -> PyResult<Store> {
    use idemkit::adapters::postgres::{PgOptions, PostgresAdapter};
    let options = PgOptions {
        schema,
        pool_size,
        ..PgOptions::default()
    };
    let pg = py
        .detach(move || PostgresAdapter::connect_with(&url, options))
        .map_err(|e| errors::store_error(py, "store-open-failed", e))?;
    Ok(Store {
        inner: RustStore::from(pg),
    })
}

#[cfg(not(feature = "postgres"))]
fn postgres_store(
    _py: Python<'_>,
    _url: String,
    _schema: Option<String>,
    _pool_size: u32,
) -> PyResult<Store> {
    Err(errors::argument(
        "this build of idemkit-rs has no PostgreSQL support (feature `postgres`)",
    ))
}
