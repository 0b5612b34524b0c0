//! The engine over redb in process: the conformance suite, claims and leases,
//! the write queue, clocks, the file format, local transactions, and a model of
//! random operations. One binary: each file under tests/engine is a module.

mod support;

mod engine {
    mod answers_that_write_nothing_skip_the_write_queue;
    mod completion_dated_by_the_clocks_estimate;
    mod concurrent_claims_one_execute;
    mod conformance;
    mod lease_expiry_takeover_and_uncertain;
    mod local_redb_write_and_outcome_commit_together;
    mod model_random_operations;
    mod store_file_format_errors;
}
