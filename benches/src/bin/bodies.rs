//! `idemkit-bodies [--out DIR]`: the benchmark bodies' sizes and SHA-256 as JSON
//! (to check the JavaScript generator produces the same bytes), optionally written out.
//!
//! `idemkit-bodies --write SHAPE BYTES FILE`: writes one body of `SHAPE` (`api`,
//! `numbers`, `unicode`) of at least `BYTES` bytes, e.g. a 40 MB document to
//! measure `idemkit canonicalize`'s peak memory on.

use sha2::{Digest as _, Sha256};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    if std::env::args().nth(1).as_deref() == Some("--write") {
        return write_one(args.skip(1).collect());
    }
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

fn write_one(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: idemkit-bodies --write api|numbers|unicode BYTES FILE";
    let [shape, bytes, file] = args.as_slice() else {
        return Err(usage.into());
    };
    let shape = idemkit_benches::bodies::Shape::ALL
        .into_iter()
        .find(|s| s.name() == shape)
        .ok_or(usage)?;
    let body = idemkit_benches::bodies::generate(shape, bytes.parse()?);
    std::fs::write(file, &body)?;
    println!("{} bytes", body.len());
    Ok(())
}
