//! Canonical JSON and fingerprints: the official JCS vectors, the number corpus
//! and edge cases, strict parsing's errors, property tests over a reference model
//! of JSON values, and which parts of a request a fingerprint covers. One binary:
//! each file under tests/canonical is a module. (The canonicalizer's memory bound
//! is `canonical_memory`, alone: it counts the whole process's heap.)

mod support;

mod canonical {
    mod fingerprint_selection;
    mod jcs_edge_cases;
    mod jcs_number_corpus;
    mod jcs_official_vectors;
    mod json_errors;
    mod properties;
}
