//! The PostgreSQL tests that need the server to themselves: two stop and restart
//! it, one times it, one terminates its listening connections, the TLS ones
//! turn its TLS on and off (and put client-certificate lines in its
//! `pg_hba.conf`). Each holds
//! `support::pg::SERVER` for its whole run, so they never overlap, and this
//! binary runs apart from `postgres` (cargo runs test binaries one after
//! another). One binary: each file under tests/postgres_serial is a module.

mod support;

mod postgres_serial {
    mod appointments_two_instances;
    mod latency;
    mod listener;
    mod restart;
    mod tls;
}
