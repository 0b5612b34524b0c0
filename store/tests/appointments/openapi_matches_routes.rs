//! The OpenAPI document of the appointments example describes the service that
//! runs: every documented path and method is routed, every other method on a
//! documented path is 405, an undocumented path is 404, and the idempotent POST
//! operations document the `Idempotency-Key` header and its grammar,
//! `Idempotent-Replayed` and the problem responses of the HTTP contract.
#![cfg(feature = "axum")]

use crate::support;

use std::collections::BTreeSet;

use support::{Service, request};

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

#[test]
fn openapi_paths_and_methods_are_the_routes() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/appointments/openapi.json"),
    )
    .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));

    let paths = doc["paths"].as_object().unwrap();
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|m| METHODS.contains(&m.as_str()))
                .map(move |m| (path.clone(), m.clone()))
        })
        .collect();
    assert_eq!(
        documented,
        BTreeSet::from([
            ("/appointments".to_owned(), "get".to_owned()),
            ("/appointments".to_owned(), "post".to_owned()),
            (
                "/appointments/{id}/reschedule".to_owned(),
                "post".to_owned()
            ),
            ("/appointments/{id}/notes".to_owned(), "get".to_owned()),
            ("/appointments/{id}/notes".to_owned(), "post".to_owned()),
            ("/health".to_owned(), "get".to_owned()),
        ])
    );

    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    for path in paths.keys() {
        for method in METHODS {
            let reply = request(
                service.addr,
                &method.to_ascii_uppercase(),
                path,
                &[("Authorization", b"Bearer openapi")],
                b"",
            )
            .unwrap();
            if documented.contains(&(path.clone(), method.to_owned())) {
                // A routed path answers its own 404 for an id that does not
                // exist (the literal `{id}`); only the fallback's is `not-found`.
                let unrouted =
                    reply.status == 405 || (reply.status == 404 && reply.problem() == "not-found");
                assert!(
                    !unrouted,
                    "{method} {path} is documented but answered {}",
                    reply.status
                );
            } else {
                assert_eq!(reply.status, 405, "{method} {path} is not documented");
            }
        }
    }
    let unknown = request(service.addr, "GET", "/undocumented", &[], b"").unwrap();
    assert_eq!(unknown.status, 404);

    // Every idempotent operation documents the contract: the key, the replay
    // header, and every answer of docs/architecture.md's table a route can give, as
    // problem+json.
    for (path, success, statuses) in [
        (
            "/appointments",
            "201",
            &[
                "400", "401", "409", "410", "413", "422", "502", "503", "504",
            ][..],
        ),
        (
            "/appointments/{id}/reschedule",
            "200",
            &[
                "400", "401", "404", "409", "410", "413", "422", "502", "503", "504",
            ][..],
        ),
        (
            "/appointments/{id}/notes",
            "201",
            &[
                "400", "401", "404", "409", "410", "413", "422", "502", "503",
            ][..],
        ),
    ] {
        let post = &doc["paths"][path]["post"];
        let param = &post["parameters"][0]["$ref"];
        let name = param.as_str().unwrap().rsplit('/').next().unwrap();
        let key = &doc["components"]["parameters"][name];
        assert_eq!(key["name"], "Idempotency-Key");
        assert_eq!(key["in"], "header");
        assert_eq!(key["required"], true);
        assert!(
            key["schema"]["pattern"].is_string(),
            "the key's grammar is stated"
        );
        assert!(post["responses"][success]["headers"]["Idempotent-Replayed"].is_object());
        for status in statuses {
            let reference = post["responses"][status]["$ref"]
                .as_str()
                .unwrap_or_else(|| panic!("{path} {status}"));
            let response = &doc["components"]["responses"][reference.rsplit('/').next().unwrap()];
            assert!(
                response["content"]["application/problem+json"].is_object(),
                "{path} {status} is a problem+json response"
            );
        }
    }
}
