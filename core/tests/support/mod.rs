//! What the test binaries of core share: the checked-in JCS data, a reference
//! model of JSON values with its many spellings, and the machine's reference
//! simulation (which `fuzz/fuzz_targets/machine.rs` includes too).

pub(crate) mod jcs;
pub(crate) mod machine_sim;
pub(crate) mod model;
