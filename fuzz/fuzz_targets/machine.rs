//! Arbitrary sequences of operations (claims, fenced worker calls with current and
//! stale tokens, ticks and jumps to deadlines, resolve, recover, GC) against the
//! same in-memory store and independent reference model as
//! core/tests/machine/reference_model.rs; any disagreement or broken invariant is
//! a crash.
#![no_main]

#[path = "../../core/tests/support/machine_sim.rs"]
mod machine_sim;

use libfuzzer_sys::fuzz_target;
use machine_sim::{Op, World};

fuzz_target!(|data: &[u8]| {
    let mut world = World::default();
    for (i, op) in Op::parse_all(data).iter().enumerate() {
        if let Err(problem) = world.apply(op) {
            panic!("step {i}: {problem}");
        }
    }
});
