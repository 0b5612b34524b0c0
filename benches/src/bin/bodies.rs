//! `idemkit-bodies [--out DIR]`: the benchmark bodies' sizes and SHA-256 as JSON
//! (to check the JavaScript generator produces the same bytes), optionally written out.

use sha2::{Digest as _, Sha256};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = match (args.next().as_deref(), args.next()) {
        (None, _) => None,
        (Some("--out"), Some(dir)) => Some(std::path::PathBuf::from(dir)),
        _ => return Err("usage: idemkit-bodies [--out DIR]".into()),
    };
    let mut list = Vec::new();
    for (shape, size, body) in idemkit_benches::bodies::all() {
        let sha: String = Sha256::digest(&body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if let Some(dir) = &out {
            std::fs::create_dir_all(dir)?;
            std::fs::write(dir.join(format!("{}-{size}.json", shape.name())), &body)?;
        }
        list.push(serde_json::json!({
            "shape": shape.name(), "size": size, "bytes": body.len(), "sha256": sha,
        }));
    }
    println!("{}", serde_json::Value::Array(list));
    Ok(())
}
