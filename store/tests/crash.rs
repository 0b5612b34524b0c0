//! Crashes and faults: processes killed mid-write, failing writes and syncs,
//! group commits under both, a disk that refuses writes. One binary: each file
//! under tests/crash is a module; the SIGKILL tests re-run this binary as their
//! child, selecting the child test by its full name.

mod support;

mod crash {
    mod group_commit_crash_sigkill_concurrent_writers;
    mod group_commit_failing_write_spares_its_group;
    mod group_commit_sixty_four_threads_claim_durably;
    mod io_faults_acknowledge_nothing;
    mod sigkill_loses_nothing_acknowledged;
    mod storage_faults_recover;
    mod while_creating_leaves_no_half_made_file;
}
