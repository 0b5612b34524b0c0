//! The `idemkit` command line as a user runs it (`call`, `exec`, `canonicalize`,
//! `fingerprint`, `key check`, `probe`, the operator commands), and the client
//! journal behind `idemkit call`. One binary: each file under tests/cli is a module.

mod support;

mod cli {
    mod bad_database_file;
    mod call_circuit_breaker;
    mod call_retries_with_one_key;
    mod canonicalize;
    mod concurrent_exec_runs_once;
    mod differential_canonicalize_npm;
    mod exec_max_execution;
    mod exec_runs_once;
    mod fingerprint;
    mod journal_one_key_per_action;
    mod key_check;
    mod operator_commands;
    mod operators_gc_resolve_tokens;
    mod probe;
}
