//! The pure state machine and the record format: the machine against a reference
//! model in virtual time, recovery of external effects after a crash, and the
//! version-1 record encoding. One binary: each file under tests/machine is a module.

mod support;

mod machine {
    mod external_crash_recovery;
    mod record_format_v1;
    mod reference_model;
}
