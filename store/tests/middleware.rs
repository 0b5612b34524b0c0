//! The tower/axum middleware in process: the HTTP contract, keys and limits,
//! leases, local transactions, outcomes, panics and dropped requests, the
//! request-line fingerprint, a store that is down, retries that wait. One binary: each file under
//! tests/middleware is a module.

mod support;

mod middleware {
    mod contract;
    mod keys_and_limits_over_http;
    mod leases;
    mod local_transactions;
    mod outcomes;
    mod panic_and_drop;
    mod request_line_fingerprint;
    mod store_unavailable;
    mod waiting;
}
