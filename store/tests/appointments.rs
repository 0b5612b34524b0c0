//! End to end through the appointments example service (and the README's quick
//! starts): real processes over real sockets, crashes, concurrent clients, its
//! OpenAPI document. One binary: each file under tests/appointments is a module.

mod support;

mod appointments {
    mod agent_call;
    mod concurrent_one_key;
    mod crash_window;
    mod fail_notify;
    mod notes_exactly_once_through_crashes;
    mod openapi_matches_routes;
    mod openapi_schemathesis;
    mod readme_quick_starts;
    mod refusals;
    mod reschedule;
    mod slow_clients;
    mod two_tenants;
}
